"""Which run the dashboard's "runs that learned" puts forward for a method, and how every other run that learned
stays one click away: a run that beat its random-reward control comes before a run with a bigger gain over its base
model alone; a gain measured on a few items without samples to pair never outranks one on many items; the
method's other runs that learned are linked under its row."""
from __future__ import annotations

import pytest
from django.utils import timezone

from apps.evals.learned import runs_that_learned
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.runs.models import Run

pytestmark = pytest.mark.django_db
N = 200


def _result(bench, spec, right: set[int], run=None, step=None, n=N, samples=True):
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished", finished_at=timezone.now())
    r = EvalResult.objects.create(job=job, benchmark=bench, scoring="math", n=n, correct=len(right),
                                  score=len(right) / n, complete=True)
    if samples:
        EvalSample.objects.bulk_create([EvalSample(result=r, index=i, item_id=f"q{i}", question="?",
                                                   score=float(i in right), correct=i in right) for i in range(n)])
    return r


def _run(owner, name, control_of=None):
    config = {"train": {"control": "random-reward"}} if control_of else {}
    return Run.objects.create(method="spice", model_name="qwen", config=config, owner=owner, status="finished",
                              name=name, control_of=control_of)


def _card(client, user) -> str:
    client.force_login(user)
    page = client.get("/").content.decode()
    return page[page.index('id="runs-that-learned"'):].split("</section>", 1)[0]


def test_a_run_that_beat_its_control_comes_first_and_the_others_that_learned_are_linked(client, researcher):
    bench = Benchmark.objects.create(name="cloze", title="cloze", kind="builtin", scoring="math", size=N)
    big = _run(researcher, "big gain, no control")
    gated = _run(researcher, "gated")
    control = _run(researcher, "gated control", control_of=gated)
    flat = _run(researcher, "flat")
    _result(bench, "base:qwen", set(range(40)))
    _result(bench, "/ckpt/big", set(range(100)), big, 30)  # +30 points, no control to beat
    _result(bench, "/ckpt/gated", set(range(70)), gated, 30)  # +15 points ...
    _result(bench, "/ckpt/control", set(range(40)), control, 30)  # ... and +15 over its control (which gained 0)
    _result(bench, "/ckpt/flat", set(range(41)), flat, 30)  # +0.5: did not learn
    (row,) = runs_that_learned()
    assert (row["run"], row["text"], row["learned"]) == (gated.pk, "+15.0", True)
    assert row["vs_control"]["learned"] and row["vs_control"]["text"] == "+15.0"
    assert [a["run"] for a in row["also"]] == [big.pk]  # the flat run did not learn, the control is never listed
    card = _card(client, researcher)
    assert f'href="/runs/{gated.pk}/"' in card and "beat its control" in card
    also = card.split('class="muted small also-learned">', 1)[1].split("</div>", 1)[0]
    assert f'href="/runs/{big.pk}/"' in also and "+30.0" in also
    assert f'href="/runs/{flat.pk}/"' not in card


def test_without_a_control_the_clearest_gain_wins_and_few_unpaired_items_never_outrank_many(client, researcher):
    few = Benchmark.objects.create(name="held-few", title="few", kind="builtin", scoring="exact", size=15)
    lots = Benchmark.objects.create(name="held-lots", title="lots", kind="builtin", scoring="exact", size=N)
    small = _run(researcher, "fifteen items")
    many = _run(researcher, "two hundred items")
    # fifteen items, no samples: 2/15 -> 5/15 is +20 points, with an interval far wider than the gain
    _result(few, "base:qwen", {0, 1}, n=15, samples=False)
    _result(few, "/ckpt/small", {0, 1, 2, 3, 4}, small, 10, n=15, samples=False)
    # two hundred items, no samples: 20% -> 28.5% is +8.5 points, its unpaired lower bound just above zero
    _result(lots, "base:qwen", set(range(40)), samples=False)
    _result(lots, "/ckpt/many", set(range(57)), many, 10, samples=False)
    (row,) = runs_that_learned()
    assert (row["run"], row["text"], row["paired"], row["learned"], row["also"]) == (many.pk, "+8.5", False, False, [])
    card = _card(client, researcher)
    assert "scores only, 200 items" in card and "<strong>+8.5</strong>" not in card  # not printed as a paired gain
    assert "no clear gain" in card
