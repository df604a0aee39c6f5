"""Seeds of one config are one line on /runs/ (issue 32 item 1): ``views.seed_rows`` puts a group line, with the
seeds and the mean and spread of their last rewards, where the group's first run stands, its runs right below it;
the table still fits a 1400 px window with a group in it."""
import re

import pytest

from apps.runs.models import Metric, Run
from apps.runs.views import seed_rows, with_last_reward
from tests.web.runs.test_live_page_browser import CHROMIUM, logged_in_page, server  # noqa: F401  (fixture)

GRPO = {"seed": 0, "method": "grpo", "train": {"lr": 1e-6, "steps": 10}, "grpo": {"group_size": 8}}


def _run(owner, seed=None, reward=None, name="", tags=(), config=None, step=10, status="finished"):
    config = config or ({**GRPO, "seed": seed} if seed is not None else GRPO)
    run = Run.objects.create(method="grpo", model_name="tiny", config=config, owner=owner, name=name, tags=list(tags),
                             total_steps=10, current_step=step, status=status)
    if reward is not None:
        Metric.objects.create(run=run, step=step, role="policy", name="reward_mean", value=reward)
    return run


def _rows(*runs):
    return seed_rows(list(with_last_reward(Run.objects.filter(pk__in=[r.pk for r in runs]).order_by("-id"))))


@pytest.mark.django_db
def test_seeds_of_one_config_make_one_group_line_with_mean_and_spread(researcher):
    a = _run(researcher, seed=0, reward=0.2, name="tta-seed0", step=8)
    lone = _run(researcher, config={**GRPO, "train": {"lr": 5e-6, "steps": 10}}, reward=0.9, name="lr5e-6")
    b = _run(researcher, seed=1, reward=0.4, name="tta-seed1")
    c = _run(researcher, seed=2, reward=0.6, name="tta-seed2", status="running")
    rows = _rows(a, lone, b, c)
    # newest first: c's place holds the group line, then c, b, a; the lone run after them
    assert [("group" if "group" in r else r["run"].pk) for r in rows] == ["group", c.pk, b.pk, a.pk, lone.pk]
    g = rows[0]["group"]
    assert g["seeds"] == "2, 1, 0" and g["n"] == 3 and g["by"] == "config" and g["ids"] == f"{c.pk},{b.pk},{a.pk}"
    assert g["mean"] == pytest.approx(0.4) and g["sd"] == pytest.approx(0.2) and (g["lo"], g["hi"]) == (0.2, 0.6)
    assert (g["step_lo"], g["step_hi"], g["statuses"]) == (8, 10, "finished, running")
    assert [r.get("seed") for r in rows[1:4]] == [2, 1, 0] and "seed" not in rows[4]


@pytest.mark.django_db
def test_a_group_without_rewards_and_a_tag_group(researcher):
    a = _run(researcher, tags=["group:sweep"], config={"lr": 1})
    b = _run(researcher, tags=["group:sweep"], config={"lr": 2}, reward=0.5)
    g = _rows(a, b)[0]["group"]
    assert g["label"] == "sweep" and g["by"] == "tag" and g["seeds"] == "?, ?"
    assert g["mean"] == 0.5 and g["sd"] is None and g["rewarded"] == 1
    assert seed_rows([]) == [] and [r["run"].pk for r in _rows(a)] == [a.pk]  # one run alone is no group


@pytest.mark.django_db
def test_the_runs_page_shows_the_group_line_and_its_seeds(client, researcher):
    a = _run(researcher, seed=0, reward=0.25, name="tta-seed0")
    b = _run(researcher, seed=1, reward=0.75, name="tta-seed1")
    _run(researcher, config={**GRPO, "train": {"lr": 5e-6}}, name="other")
    client.force_login(researcher)
    html = client.get("/runs/").content.decode()
    groups = re.findall(r'<tr class="seed-group".*?</tr>', html, re.S)
    assert len(groups) == 1
    assert "2 seeds" in groups[0] and "seeds 1, 0" in groups[0] and f'href="/runs/compare/?ids={b.pk},{a.pk}"' in groups[0]
    assert groups[0].count("seeds 1, 0") == 1  # named once, not in the label and again after it
    assert re.search(r"0\.500 <span class=\"muted\">± 0\.354</span>", groups[0])
    assert html.count('class="seed-member"') == 2 and "seed 0</div>" in html and "seed 1</div>" in html
    assert html.count('name="ids"') == 3  # every run still has its compare box; the group line has none
    html = client.get("/runs/?q=other").content.decode()
    assert "seed-group" not in html  # the filter leaves one run of the group: no group


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")
def test_the_runs_table_with_seed_groups_fits_1400_px(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    long = {**GRPO, "model": {"name_or_path": "/tmp/models/qwen2.5-coder-1.5b-instruct-with-a-long-folder-name"}}
    for i in range(4):
        _run(researcher, config={**long, "seed": i}, reward=0.1 * i,
             name=f"spice-gate-gsm8kdocs-qwen15-lr2e-6-rules3-control-seed{i}-a-rather-long-name",
             tags=["gsm8k", "gate", "long-tag-for-wrapping"])
    for i in range(2):
        _run(researcher, tags=["group:a-very-long-sweep-name-for-wrapping-over-several-lines-of-the-cell"], config={"n": i})
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/runs/", {"width": 1400, "height": 900})
        try:
            assert page.locator("tr.seed-group").count() == 2 and page.locator("tr.seed-member").count() == 6
            width = page.evaluate("document.documentElement.scrollWidth")
            right = page.evaluate("document.getElementById('runs').getBoundingClientRect().right")
            assert width <= 1400 and right <= 1400, (width, right)
            page.locator("tr.seed-group a.seed-group-compare").first.click()
            page.wait_for_url(re.compile(r".*/runs/compare/\?ids=\d+(,\d+)+$"))
            assert page.locator("#compare-groups").count() == 1  # the compare view draws them as one band
            assert errors == []
        finally:
            browser.close()


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[3] / "examples" / "runs"


def _import_examples():
    import io

    from django.core.management import call_command

    folders = sorted(str(p) for p in EXAMPLES.iterdir() if (p / "config.yaml").exists())
    call_command("import_run", *folders, stdout=io.StringIO())
    return {(r.imported_name or r.name): r for r in Run.objects.all()}


@pytest.mark.django_db
def test_runs_sharing_a_seed_are_no_seed_group(researcher):
    a = _run(researcher, seed=0, name="trl-a", config={**GRPO, "train": {"lr": 1e-6, "time_limit_minutes": 13}})
    b = _run(researcher, seed=0, name="trl-b", config={**GRPO, "train": {"lr": 1e-6, "time_limit_minutes": 11}})
    c = _run(researcher, seed=0, name="trl-c", config={**GRPO, "train": {"lr": 1e-6, "time_limit_minutes": 11}})
    assert [("group" if "group" in r else r["run"].pk) for r in _rows(a, b, c)] == [c.pk, b.pk, a.pk]
    from apps.runs import compare
    assert compare.seed_groups([a, b, c]) == []


@pytest.mark.django_db
def test_the_demo_examples_group_only_runs_with_distinct_seeds_and_compare_bands_them(client, researcher):
    from apps.runs import compare
    runs = _import_examples()
    groups = compare.seed_groups(list(Run.objects.order_by("id")))
    names = [sorted((Run.objects.get(pk=pk).imported_name or "") for pk in g["runs"]) for g in groups]
    # the h100 pair and the tta triple share every learning setting but checkpointing: seeds 0, 1 and 0, 1, 2
    # repeat together, so each part is split off by its checkpoint settings; runs that share seed 0 stay apart.
    # SPICE on GSM8K's solutions, seeds 0 and 1, and their two controls: two groups (a control is its own config);
    # seeds 2 and 3 ran with the gate's later defaults (5 consensus readers, shuffled options): two more groups
    assert sorted(names) == [["grpo-gsm8k-qwen05-lr1e-6-h100-seed0", "grpo-gsm8k-qwen05-lr1e-6-h100-seed1"],
                             ["grpo-gsm8k-qwen05-tta-seed0", "grpo-gsm8k-qwen05-tta-seed1",
                              "grpo-gsm8k-qwen05-tta-seed2"],
                             ["spice-gate-gsm8kdocs-qwen15", "spice-gate-gsm8kdocs-qwen15-seed1"],
                             ["spice-gate-gsm8kdocs-qwen15-control", "spice-gate-gsm8kdocs-qwen15-seed1-control"],
                             ["spice-gate-gsm8kdocs-qwen15-seed2", "spice-gate-gsm8kdocs-qwen15-seed3"],
                             ["spice-gate-gsm8kdocs-qwen15-seed2-control", "spice-gate-gsm8kdocs-qwen15-seed3-control"],
                             ["spice-gate-wiki-qwen15", "spice-gate-wiki-qwen15-seed1"],
                             ["spice-gate-wiki-qwen15-control", "spice-gate-wiki-qwen15-seed1-control"]], names
    for g in groups:
        seeds = [Run.objects.get(pk=pk).config["seed"] for pk in g["runs"]]
        assert len(set(seeds)) == len(seeds), g
    # a group is named by its runs' common name, the model's own digits kept ("qwen15", not "qwen")
    labels = [g["label"].split(" · seeds")[0] for g in groups]
    assert {"spice · spice-gate-wiki-qwen15", "spice · spice-gate-wiki-qwen15-control",
            "grpo · grpo-gsm8k-qwen05-tta"} <= set(labels), labels
    assert len(set(labels)) == len(labels), labels  # a run's group and its control's read differently
    # two groups of one name whose configs differ (the gate's consensus readers, 3 then 5) say how
    assert {"spice · spice-gate-gsm8kdocs-qwen15 · gate.consensus_samples=3",
            "spice · spice-gate-gsm8kdocs-qwen15 · gate.consensus_samples=5"} <= set(labels), labels
    assert "trl-grpo-gsm8k-qwen05-tta" in runs
    # the compare view bands them by the same groups (one import of the examples for both: it takes a while)
    names = ["grpo-gsm8k-qwen05-lr1e-6-h100-seed0", "grpo-gsm8k-qwen05-lr1e-6-h100-seed1",
             "grpo-gsm8k-qwen05-tta-seed0", "grpo-gsm8k-qwen05-tta-seed1", "grpo-gsm8k-qwen05-tta-seed2",
             "trl-grpo-gsm8k-qwen05-lr1e-6", "trl-grpo-gsm8k-qwen05-tta"]
    client.force_login(researcher)
    response = client.get("/runs/compare/?ids=" + ",".join(str(runs[n].pk) for n in names))
    assert response.status_code == 200
    bands = [sorted(g["runs"]) for g in response.context["seed_groups"]]
    assert sorted(bands) == sorted([sorted(runs[n].pk for n in names[:2]), sorted(runs[n].pk for n in names[2:5])])


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make browser installs it)")
def test_the_runs_table_of_the_demo_examples_fits_1400_px(roles, researcher, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    _import_examples()
    Run.objects.update(owner=researcher)
    # make demo's own live run: launcher overrides shown as key=value codes in the settings column
    Run.objects.create(method="spice", model_name="/tmp/models/smollm2-135m-instruct", owner=researcher,
                       status="running", corpus_name="wikipedia", total_steps=30, current_step=5, config={},
                       overrides={"config": {"train": {"device": "cpu", "steps": 30, "prompts_per_step": 1,
                                                       "time_limit_minutes": 20.0, "micro_batch_size": 2},
                                             "rollout": {"group_size": 2, "max_new_tokens": 96, "temperature": 1.0},
                                             "spice": {"challenger_max_new_tokens": 160, "docs_per_step": 1}}})
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, errors = logged_in_page(p, server, "/runs/", {"width": 1400, "height": 900})
        try:
            width = page.evaluate("document.documentElement.scrollWidth")
            right = page.evaluate("document.getElementById('runs').getBoundingClientRect().right")
            assert width <= 1400 and right <= 1400, (width, right)
            # the two GRPO groups; SPICE over GSM8K's solutions (seeds 0 + 1, 2 + 3) and over Wikipedia (seeds 0 + 1),
            # and their controls
            assert page.locator("tr.seed-group").count() == 8
            assert "seeds 0, 0" not in page.content()
            assert errors == []
        finally:
            browser.close()


def test_a_group_name_keeps_the_names_own_digits_and_drops_the_seed():
    from apps.runs.compare import _common_name

    class R:
        def __init__(self, name):
            self.name, self.imported_name = name, ""

    assert _common_name([R("spice-qwen15"), R("spice-qwen15-seed1")]) == "spice-qwen15"
    assert _common_name([R("grpo-tta-seed0"), R("grpo-tta-seed1")]) == "grpo-tta"
    assert _common_name([R("x-seed10"), R("x-seed11")]) == "x"
    assert _common_name([R("run-3"), R("run-4")]) == "run"
    assert _common_name([R("spice-qwen15-control"), R("spice-qwen15-seed1-control")]) == "spice-qwen15-control"
    assert _common_name([R("rapeseed-a"), R("rapeseed-b")]) == "rapeseed"
    assert _common_name([R("a"), R("b")]) == "same config"


@pytest.mark.django_db
def test_groups_of_one_name_say_the_setting_that_tells_them_apart(researcher):
    """Two configs under one name (a default changed between seeds) read differently: the differing setting is in
    each label; parts of one config split only by their checkpoint settings keep plain labels (their seeds differ)."""
    from apps.runs import compare

    def cfg(seed, group_size, every=10):
        return {**GRPO, "seed": seed, "grpo": {"group_size": group_size}, "checkpoint": {"every": every}}

    runs = [_run(researcher, name=f"x-seed{s}", config=cfg(s, g)) for s, g in ((0, 8), (1, 8), (2, 4), (3, 4))]
    labels = sorted(g["label"] for g in compare.seed_groups(runs))
    assert labels == ["grpo · x · grpo.group_size=4 · seeds 2, 3", "grpo · x · grpo.group_size=8 · seeds 0, 1"]
    again = [_run(researcher, name=f"y-seed{s}", config=cfg(s, 8, every)) for s, every in ((0, 5), (1, 5), (0, 7), (1, 7))]
    labels = [g["label"] for g in compare.seed_groups(again)]
    assert labels == ["grpo · y · seeds 0, 1"] * 2 and not any(" ·  · " in label for label in labels)
