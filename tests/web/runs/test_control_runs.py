"""Built-in controls (issue 30): a run launched with a control brings its twin, the same config with
train.control: random-reward, linked by Run.control_of; from the API, the launch form and manage.py launch;
both run pages link each other."""
import django_rq
import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from apps.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _commit(django_capture_on_commit_callbacks):
    """django-rq enqueues on commit; run those callbacks inside the test's transaction."""
    global _callbacks
    _callbacks = django_capture_on_commit_callbacks


def _post(user, **body):
    client = APIClient()
    client.force_authenticate(user)
    with _callbacks(execute=True):
        return client.post("/api/v1/runs/", body, format="json")


def _same_but_control(run, twin):
    mine, theirs = dict(run.config), dict(twin.config)
    assert mine["train"].pop("control") == "none" and theirs["train"].pop("control") == "random-reward"
    assert mine == theirs  # everything else is the run's config: same seed, data, steps, eval section


def test_the_api_launches_the_run_and_its_random_reward_control(researcher, tiny_grpo):
    model, config = tiny_grpo
    response = _post(researcher, method="grpo", model=model, config={**config, "train.control_p": 0.3},
                     control="random-reward")
    assert response.status_code == 201, response.json()
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    (twin,) = Run.objects.exclude(pk=run.pk)
    assert body["controls"] == [twin.pk] and body["control_of"] is None
    assert twin.control_of == run and list(run.controls.all()) == [twin]
    _same_but_control(run, twin)
    assert twin.config["train"]["control_p"] == 0.3  # the control's own knob travels with the config
    assert (twin.status, twin.queue, twin.owner, twin.total_steps) == ("queued", "cpu", researcher, 4)
    assert django_rq.get_queue("cpu").job_ids == [run.job_id, twin.job_id]  # both queued
    assert twin.events.get().message == f"queued on cpu by rita as the random-reward control of run {run.pk}"
    detail = APIClient()
    detail.force_authenticate(researcher)
    assert detail.get(f"/api/v1/runs/{twin.pk}/").json()["control_of"] == run.pk


def test_without_a_control_one_run_is_launched(researcher, tiny_grpo):
    model, config = tiny_grpo
    response = _post(researcher, method="grpo", model=model, config=config, control="none")
    assert response.status_code == 201
    assert Run.objects.count() == 1 and response.json()["controls"] == []


@pytest.mark.parametrize("extra,path,needle", [
    ({"control": "shuffled-labels"}, "control", "unknown control 'shuffled-labels'; use random-reward"),
    ({"control": "random-reward", "config": {"train.control": "random-reward"}}, "control",
     "the config is a control run already"),
    ({"control": "random-reward", "set": ["train.control=none"]}, "train.control", "set to none by the overrides"),
])
def test_a_bad_control_request_is_refused_with_its_field_and_launches_nothing(researcher, tiny_grpo, extra, path,
                                                                              needle):
    model, config = tiny_grpo
    body = {"method": "grpo", "model": model, **extra, "config": {**config, **extra.get("config", {})}}
    response = _post(researcher, **body)
    assert response.status_code == 400, response.json()
    assert needle in response.json()["fields"][path]
    assert not Run.objects.exists()


def test_a_config_key_alone_launches_one_control_run(researcher, tiny_grpo):
    model, config = tiny_grpo
    response = _post(researcher, method="grpo", model=model, config={**config, "train.control": "random-reward"})
    assert response.status_code == 201
    run = Run.objects.get()
    assert run.config["train"]["control"] == "random-reward" and run.control_of is None


def test_the_launch_form_checkbox_launches_the_twin_and_both_pages_link_each_other(researcher, client, run_env,
                                                                                   tiny_grpo):
    model, config = tiny_grpo
    client.force_login(researcher)
    form = client.get("/runs/new/?method=grpo").content.decode()
    assert 'name="control"' in form and "also launch a random-reward control" in form
    post = {"method": "grpo", "model": model, "queue": "cpu", "control": "on",
            "cfg__data__path": config["data"]["path"], "cfg__reward": "exact", "cfg__train__steps": "4",
            "cfg__train__device": "cpu"}
    with _callbacks(execute=True):
        response = client.post("/runs/new/", post, follow=True)
    assert response.status_code == 200
    run = Run.objects.get(control_of__isnull=True)
    twin = Run.objects.get(control_of=run)
    _same_but_control(run, twin)
    page = response.content.decode()  # the run's page (redirected to it)
    assert f"Run {run.pk} queued on cpu, with its random-reward control, run {twin.pk}." in page
    assert 'id="run-control-runs"' in page and f'href="/runs/{twin.pk}/"' in page
    twin_page = client.get(f"/runs/{twin.pk}/").content.decode()
    assert 'id="run-control-of"' in twin_page and f'href="/runs/{run.pk}/"' in twin_page
    assert "train.control: random-reward" in twin_page


def test_manage_py_launch_control(tiny_grpo, tmp_path, capsys):
    import yaml

    model, config = tiny_grpo
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    with _callbacks(execute=True):
        call_command("launch", "grpo", "--model", model, "--config", str(path), "--control", "random-reward")
    out, err = capsys.readouterr()
    run = Run.objects.get(pk=int(out.strip()))
    twin = run.controls.get()
    assert f"run {twin.pk}: its random-reward control" in err
    _same_but_control(run, twin)


def _folder(root, name, control="none", model="Qwen/Qwen2.5-Coder-1.5B-Instruct"):
    import json

    import yaml

    folder = root / name
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump({"method": "spice", "model": {"name_or_path": model},
                                                        "train": {"steps": 10, "control": control}}))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "reasoner", "loss": 0.5}) + "\n")
    return folder


def test_import_run_links_a_control_folder_to_its_run(tmp_path, capsys):
    import io

    from django.core.management.base import CommandError

    main = _folder(tmp_path, "spice-wiki")
    control = _folder(tmp_path, "spice-wiki-control", "random-reward")
    call_command("import_run", str(main), stdout=io.StringIO())
    run = Run.objects.get(imported_from=str(main))
    call_command("import_run", str(control), "--control-of", str(main), stdout=io.StringIO())
    twin = Run.objects.get(imported_from=str(control))
    assert twin.control_of == run and list(run.controls.all()) == [twin]
    call_command("import_run", str(control), stdout=io.StringIO())  # imported again: the link stays
    assert Run.objects.get(pk=twin.pk).control_of_id == run.pk
    with pytest.raises(CommandError, match="is not a control run"):  # the other way round
        call_command("import_run", str(main), "--control-of", str(twin.pk), stdout=io.StringIO())
    other = _folder(tmp_path, "other-model-control", "random-reward", model="Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(CommandError, match="a control is the same config"):
        call_command("import_run", str(other), "--control-of", str(run.pk), stdout=io.StringIO())
    with pytest.raises(CommandError, match="no such run"):
        call_command("import_run", str(other), "--control-of", "999999", stdout=io.StringIO())
    assert not Run.objects.filter(imported_from=str(other)).exists()  # a refused link imports nothing


def test_a_shipped_control_folder_links_itself_to_its_run_and_its_page_shows_both_gains(client, django_user_model):
    """examples/runs/spice-gate-wiki-qwen15-control holds a control_of file: imported as make demo does (one folder
    after another, no flag, in the shell's glob order, which puts `spice-gate-wiki-qwen15-control/` before
    `spice-gate-wiki-qwen15/`), it is linked, and the run page shows the gain over the base and over the control."""
    import io
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "examples" / "runs"
    for name in ("spice-gate-wiki-qwen15-control", "spice-gate-wiki-qwen15"):  # the control first, as make demo
        call_command("import_run", str(root / name), stdout=io.StringIO())
    run = Run.objects.get(imported_from=str((root / "spice-gate-wiki-qwen15").resolve()))
    twin = Run.objects.get(imported_from=str((root / "spice-gate-wiki-qwen15-control").resolve()))
    assert twin.control_of == run
    admin = django_user_model.objects.create_superuser("ctl-admin", "a@example.com", "pw-Long-enough-1")
    client.force_login(admin)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    # held-out cloze: +5.0 over the base, +6.0 over the control, paired on the same 300 items
    assert "+5.0" in page and "+6.0" in page
    assert "0<span class=\"muted empty-reason\">: Nothing of this run was sent to review" in page  # "0: ...", not "0 : ..."
    from apps.evals.models import CrossPlay

    cross = CrossPlay.objects.get(run=run)  # imported with the folder: its scores, not the tasks behind them
    assert "kept the matrix's scores, not the tasks" in client.get(f"/evals/crossplay/{cross.pk}/").content.decode()


@pytest.mark.parametrize("name, shown", [
    ("ssp-gate-wiki-qwen15", ("-14.0", "-2.7")),  # held-out cloze: under the base, and under its control
    ("spice-gate-gsm8kdocs-qwen15", ("+4.2",)),  # GSM8K held-out over the base; the control has no evaluation
])
def test_the_shipped_ssp_and_gsm8k_pairs_show_their_paired_gains(client, django_user_model, name, shown):
    """The 2026-11-28 pairs of issue 30 item 5b / 5c, imported as make demo does (the control first): linked, and the
    run page shows what they measured, a loss where there was one, and says so where the control was not evaluated."""
    import io
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "examples" / "runs"
    for folder in (f"{name}-control", name):
        call_command("import_run", str(root / folder), stdout=io.StringIO())
    run = Run.objects.get(imported_from=str((root / name).resolve()))
    assert Run.objects.get(imported_from=str((root / f"{name}-control").resolve())).control_of == run
    admin = django_user_model.objects.create_superuser(f"{name[:20]}-admin", "a@example.com", "pw-Long-enough-1")
    client.force_login(admin)
    page = client.get(f"/runs/{run.pk}/").content.decode().replace("\u2212", "-")
    for text in shown:
        assert text in page


def _import_examples(*names):
    import io
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "examples" / "runs"
    for name in names:
        call_command("import_run", str(root / name), stdout=io.StringIO())
    return {name: Run.objects.get(imported_from=str((root / name).resolve())) for name in names}


def _result_cells(html) -> dict[int, str]:
    """Run id -> the text of its row's "result" cell on /runs/."""
    import re

    cells = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S):
        pick = re.search(r'name="ids" value="(\d+)"', row)
        cell = re.search(r'<td class="run-result">(.*?)</td>\s*<td>', row, re.S)
        if pick and cell:
            cells[int(pick.group(1))] = cell.group(1)
    return cells


def _text(fragment: str) -> str:
    import re

    return " ".join(re.sub(r"<[^>]+>", " ", fragment).split())


def test_the_runs_table_says_what_each_run_showed(client, django_user_model):
    """/runs/'s result column (issue 32 follow-up): a run's headline paired gain over its base model with its
    interval, marked learned only when the interval lies above 0, its gain over its control where it has one, and an
    empty cell for a run without evaluations; the same numbers as the home page's "runs that learned" (one
    computation: apps/evals/learned.py), and a header line on the run page above the charts."""
    from apps.evals.learned import headlines

    runs = _import_examples("spice-gate-wiki-qwen15-control", "spice-gate-wiki-qwen15",
                            "ssp-gate-wiki-qwen15-control", "ssp-gate-wiki-qwen15")
    bare = Run.objects.create(method="grpo", model_name="m", status="finished", config={}, total_steps=3)
    admin = django_user_model.objects.create_superuser("res-admin", "a@example.com", "pw-Long-enough-1")
    client.force_login(admin)
    html = client.get("/runs/").content.decode().replace("\u2212", "-")
    cells = _result_cells(html)
    assert set(cells) == {r.pk for r in runs.values()} | {bare.pk}
    assert cells[bare.pk].strip() == ""  # no evaluation: nothing, not "0"
    spice, ssp = runs["spice-gate-wiki-qwen15"], runs["ssp-gate-wiki-qwen15"]
    rows = headlines(list(runs.values()), latest=True)
    for run in (spice, ssp):
        h, text = rows[run.pk], _text(cells[run.pk])
        assert text.startswith(f"{h['text']} {h['interval']} vs base"), text
        assert ("learned" in text.split("vs base")[1].split("vs control")[0]) == h["learned"]
        c = h["vs_control"]
        assert c is not None and f"{c['text']} {c['interval']} vs control" in text
        assert ("beat its control" in text) == c["learned"]
    # its latest checkpoint, as the run page's gains: ssp under its base and its control, spice over both
    assert _text(cells[ssp.pk]).startswith("-14.0 [") and "no clear gain" in _text(cells[ssp.pk])
    assert "-2.7" in _text(cells[ssp.pk])
    assert _text(cells[spice.pk]).startswith("+5.0 [") and "+6.0" in _text(cells[spice.pk])
    control = runs["spice-gate-wiki-qwen15-control"]
    assert "vs base" in _text(cells[control.pk]) and "vs control" not in _text(cells[control.pk])
    page = client.get(f"/runs/{spice.pk}/").content.decode().replace("\u2212", "-")
    head = page.index('id="run-headline"')
    assert head < page.index('id="reward-card"') and head < page.index('class="run-facts')
    line = _text(page[head:page.index("</p>", head)])
    assert f"{rows[spice.pk]['text']} {rows[spice.pk]['interval']} vs base on" in line and "vs control" in line
    assert 'id="run-headline"' not in client.get(f"/runs/{bare.pk}/").content.decode()
    assert "vs control (its step 34, this run's 32)" in line  # time-limited: the control made two more steps


def test_a_control_evaluated_at_another_step_says_so_beside_the_gain(client, django_user_model):
    """Seed 2 of SPICE on GSM8K's solutions ran 12 steps in its minutes, its control 15: the gain over the control
    compares different lengths, and the headline says which steps, in the table and on the run page."""
    runs = _import_examples("spice-gate-gsm8kdocs-qwen15-seed2-control", "spice-gate-gsm8kdocs-qwen15-seed2")
    admin = django_user_model.objects.create_superuser("res-admin", "a@example.com", "pw-Long-enough-1")
    client.force_login(admin)
    run = runs["spice-gate-gsm8kdocs-qwen15-seed2"]
    cells = _result_cells(client.get("/runs/").content.decode().replace("\u2212", "-"))
    assert "vs control (its step 15, this run's 12)" in _text(cells[run.pk])
    page = client.get(f"/runs/{run.pk}/").content.decode().replace("\u2212", "-")
    head = page.index('id="run-headline"')
    assert "+8.6 [+4.7, +12.3] vs control (its step 15, this run's 12)" in _text(page[head:page.index("</p>", head)])


def test_the_result_column_reads_a_fixed_number_of_queries(client, django_user_model):
    """The result column costs the same number of queries whatever the number of evaluated runs without a control
    (no query per row)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    admin = django_user_model.objects.create_superuser("q-admin", "a@example.com", "pw-Long-enough-1")
    client.force_login(admin)
    _import_examples("grpo-gsm8k-qwen05-lr1e-6", "grpo-gsm8k-qwen05-lr5e-6")
    with CaptureQueriesContext(connection) as two:
        assert client.get("/runs/").status_code == 200
    _import_examples("grpo-gsm8k-qwen05-tta-seed0", "grpo-gsm8k-qwen05-tta-seed1", "grpo-gsm8k-qwen05-tta-seed2")
    with CaptureQueriesContext(connection) as five:
        html = client.get("/runs/").content.decode()
    assert sum(1 for cell in _result_cells(html).values() if "vs base" in cell) == 5
    assert len(five) == len(two) <= 40, [q["sql"][:120] for q in five.captured_queries]
