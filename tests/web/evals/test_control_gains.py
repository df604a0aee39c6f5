"""The gain over the base model and over the random-reward control (issue 30): a run with a linked control shows,
on both run pages and in the compare view, run - base, control - base and run - control, each paired on the same
items with its 95% interval (apps/evals/compare.py control_gains over trainer.evaluate.paired_difference)."""
from __future__ import annotations

import re

import pytest

from apps.evals.compare import control_gains, control_pairs
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.runs.models import Run
from trainer.evaluate import bootstrap_ci, paired_difference

pytestmark = pytest.mark.django_db
N = 200
MODEL = "smollm2-135m-instruct"
BASE = set(range(0, 60))  # 30%
RUN = set(range(10, 100))  # 45%: items 60..99 gained (40), 0..9 lost (10)
CONTROL = set(range(0, 50))  # 25%: 10 lost against the base


def _evaluated(spec, bench, right: set[int], run=None, step=None, order=None) -> EvalResult:
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished", queue="cpu")
    job.benchmarks.add(bench)
    items = list(order or range(N))
    scores = [float(i in right) for i in items]
    lo, hi = bootstrap_ci(scores)
    result = EvalResult.objects.create(job=job, benchmark=bench, scoring="exact", n=N, correct=int(sum(scores)),
                                       score=sum(scores) / N, ci_low=lo, ci_high=hi, complete=True)
    EvalSample.objects.bulk_create([EvalSample(result=result, index=k, item_id=f"q{i}", question="q",
                                               score=float(i in right), correct=i in right) for k, i in enumerate(items)])
    return result


def _scores(right):
    return {f"q{i}": float(i in right) for i in range(N)}


@pytest.fixture
def pair(researcher):
    run = Run.objects.create(method="spice", model_name=MODEL, config={"train": {"control": "none"}},
                             owner=researcher, status="finished", queue="cpu")
    control = Run.objects.create(method="spice", model_name=MODEL, config={"train": {"control": "random-reward"}},
                                 owner=researcher, status="finished", queue="cpu", control_of=run)
    bench = Benchmark.objects.create(name="cloze-heldout", title="cloze", kind="upload", scoring="exact")
    _evaluated(f"base:{MODEL}", bench, BASE)
    _evaluated("/ckpt/run/step-10", bench, RUN, run=run, step=10, order=reversed(range(N)))  # by id, not position
    _evaluated("/ckpt/control/step-10", bench, CONTROL, run=control, step=10)
    _evaluated("/ckpt/control/step-20", bench, set(), run=control, step=20)  # not the run's step: not used
    return run, control


def _cells(html: str) -> dict[str, str]:
    row = html.split('class="control-gain"', 1)[1].split("</tr>", 1)[0]
    cells = re.findall(r'<td class="(vs_base|control_vs_base|vs_control)">(.*?)</td>', row, re.S)
    return {k: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", v)).strip() for k, v in cells}


def _shown(p) -> str:
    return f'{100 * p["diff"]:+.1f} [{100 * p["low"]:+.1f}, {100 * p["high"]:+.1f}]'


def test_both_differences_are_paired_on_the_same_items_at_the_same_step(pair):
    run, control = pair
    (row,) = control_gains(control_pairs(run))
    assert control_pairs(control) == [(run, control)]  # the control's page shows the same pair
    assert (row["step"], row["control_step"], row["same_step"]) == (10, 10, True)
    assert row["vs_base"] == pytest.approx(paired_difference(_scores(BASE), _scores(RUN)))
    assert row["control_vs_base"] == pytest.approx(paired_difference(_scores(BASE), _scores(CONTROL)))
    vs_control = paired_difference(_scores(CONTROL), _scores(RUN))
    assert row["vs_control"] == pytest.approx(vs_control)
    assert (vs_control["gained"], vs_control["lost"], vs_control["n"]) == (50, 10, N)  # 50..99 gained, 0..9 lost
    assert row["vs_base"]["diff"] == pytest.approx(0.15) and row["vs_control"]["diff"] == pytest.approx(0.20)


def test_the_run_pages_and_the_compare_view_show_both_differences(pair, client, researcher):
    run, control = pair
    (row,) = control_gains(control_pairs(run))
    expected = {"vs_base": _shown(row["vs_base"]), "control_vs_base": _shown(row["control_vs_base"]),
                "vs_control": _shown(row["vs_control"])}
    assert expected["vs_control"].startswith("+20.0 [")
    client.force_login(researcher)
    for page in (f"/runs/{run.pk}/", f"/runs/{control.pk}/", f"/runs/compare/?ids={run.pk},{control.pk}"):
        html = client.get(page).content.decode()
        assert _cells(html) == expected, page
        assert 'class="paired gain"' in html.split('class="control-gain"', 1)[1].split("</tr>", 1)[0]
    compare = client.get(f"/runs/compare/?ids={run.pk},{control.pk}").content.decode()
    assert compare.count('class="control-gain"') == 1  # the pair once, though both runs are compared


def test_a_control_not_evaluated_yet_leaves_its_differences_empty_and_a_run_without_one_shows_nothing(
        pair, client, researcher):
    run, control = pair
    EvalResult.objects.filter(job__run=control).delete()
    (row,) = control_gains(control_pairs(run))
    assert row["vs_base"] is not None and row["control_vs_base"] is None and row["vs_control"] is None
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "no checkpoint evaluated on cloze-heldout yet" in html
    control.delete()
    assert control_gains(control_pairs(Run.objects.get(pk=run.pk))) == []
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="control-gain"' not in html and 'id="evals-panel"' in html  # the panel, without the control rows
