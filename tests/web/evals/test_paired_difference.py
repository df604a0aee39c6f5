"""A checkpoint's paired difference from the base model on the same items (apps/evals/compare.py ``paired``,
over ``trainer.evaluate.paired_difference``), where the evals pages show its score: the compare view (page and
API), the run page's evaluations panel and the evaluation's own page.

Imported: a run folder whose eval_samples/ hold the items of evals.jsonl's lines (manage.py import_run), as
the GPU SPICE run's held-out cloze: 13.0% -> 19.0% of 300 items, two overlapping intervals, and a paired
+6.0 points whose interval excludes 0 (30 items gained, 12 lost). Re-importing changes nothing; a bad
samples line fails the import whole. Web evaluations: results whose samples an eval job stored
(created directly here), matched by item id, else by index."""
from __future__ import annotations

import io
import json
import re

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from apps.evals.compare import comparison
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.runs.models import Checkpoint, Run
from trainer.evaluate import append_eval, bootstrap_ci, paired_difference, write_eval_samples

N = 300
BASE = set(range(0, 39))  # 39 of 300 right: 13.0%
AFTER = set(range(12, 69))  # 57 right: 19.0%; items 39..68 gained (30), 0..11 lost (12): +18 / 300 = +6.0 points
BENCH = "cloze-heldout"
MODEL = "Qwen/Qwen2.5-1.5B-Instruct"


def _scores(right: set[int]) -> dict:
    return {f"cloze-{i}": float(i in right) for i in range(N)}


EXPECTED = paired_difference(_scores(BASE), _scores(AFTER))


def _sample(i: int, right: bool) -> dict:
    """One sample as benchmarks/gpu/spice_eval.py writes it (trainer.evaluate.evaluate's)."""
    return {"index": i, "id": f"cloze-{i}", "question": f"In document {i}, who ___?", "gold": ["Ada", "Ada Lovelace"],
            "prediction": "Ada" if right else "Babbage", "output": f"\\boxed{{{'Ada' if right else 'Babbage'}}}",
            "score": float(right), "correct": right, "scoring": "exact", "document_id": f"doc-{i}"}


def _record(root, step: int, right: set[int], samples: bool = True) -> None:
    values = [float(i in right) for i in range(N)]
    lo, hi = bootstrap_ci(values)
    append_eval(root, {"step": step, "checkpoint": f"base:{MODEL}" if step == 0 else f"/gpu/run/checkpoints/step-{step:06d}",
                       "benchmark": BENCH, "scoring": "exact", "n": N, "score": sum(values) / N, "ci_low": lo,
                       "ci_high": hi, "seconds": 3.0})
    if samples:
        write_eval_samples(root, BENCH, step, [_sample(i, i in right) for i in range(N)])


@pytest.fixture
def folder(tmp_path):
    """A GPU run's folder without weights: config, metrics, a checkpoint at step 10, its evaluation and the
    base model's (step 0) on the held-out cloze, each with its items in eval_samples/."""
    root = tmp_path / "spice-run"
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump({"method": "spice", "model": {"name_or_path": MODEL},
                                                      "train": {"steps": 10}}))
    (root / "metrics.jsonl").write_text(json.dumps({"step": 1, "role": "reasoner", "loss": 0.5}) + "\n")
    (root / "checkpoints.jsonl").write_text(json.dumps({"step": 10, "path": "/gpu/run/checkpoints/step-000010"}) + "\n")
    _record(root, 0, BASE)
    _record(root, 10, AFTER)
    return root


def _import(folder) -> str:
    out = io.StringIO()
    call_command("import_run", str(folder), stdout=out)
    return out.getvalue()


def _fails(folder) -> str:
    with pytest.raises(CommandError) as info:
        _import(folder)
    return str(info.value)


def _fragment(html: str) -> str:
    """The paired difference as the page shows it (templates/evals/_paired.html)."""
    found = re.findall(r'<span class="paired[^"]*" title="[^"]*">[^<]*</span>', html)
    assert len(found) == 1, found
    return found[0]


def _shown(p: dict) -> str:
    return (f'<span class="paired gain" title="paired over {p["n"]} items: {p["gained"]} gained, {p["lost"]} lost">'
            f'{100 * p["diff"]:+.1f} [{100 * p["low"]:+.1f}, {100 * p["high"]:+.1f}] vs base</span>')


def _sample_rows(run) -> list:
    return sorted(EvalSample.objects.filter(result__job__run=run).values_list(
        "result__job__step", "index", "item_id", "score", "correct", "question", "gold", "prediction", "output", "data"),
        key=lambda r: (r[0] or 0, r[1]))


# ---- imported -----------------------------------------------------------------------------------

def test_an_imported_checkpoint_shows_its_paired_difference_from_the_base_model(db, folder, client, researcher):
    printed = _import(folder)
    assert "2 evaluations (600 item samples)" in printed
    run = Run.objects.get()
    base = EvalResult.objects.get(job__run=run, job__step__isnull=True)
    after = EvalResult.objects.get(job__run=run, job__step=10)
    assert (base.score, after.score) == (0.13, 0.19)
    assert base.ci_high > after.ci_low  # the two intervals overlap...
    assert EXPECTED["low"] > 0  # ...while the paired one excludes 0
    assert (EXPECTED["diff"], EXPECTED["n"], EXPECTED["gained"], EXPECTED["lost"]) == (pytest.approx(0.06), N, 30, 12)

    # the samples are the file's items, stored as an eval job stores its own
    assert after.samples.count() == base.samples.count() == N
    s = after.samples.get(index=40)
    assert (s.item_id, s.question, s.gold, s.prediction, s.output, s.correct, s.score) == \
        ("cloze-40", "In document 40, who ___?", "Ada | Ada Lovelace", "Ada", "\\boxed{Ada}", True, 1.0)
    assert s.data == {"aliases": ["Ada", "Ada Lovelace"], "document_id": "doc-40"}

    # the compare view's data (API) and table
    api = APIClient()
    api.force_authenticate(researcher)
    data = api.get(f"/api/v1/evals/compare/?run={run.pk}&benchmark={BENCH}").json()
    cells = {row["step"]: row["cells"][0] for row in data["rows"]}
    assert cells[None]["paired"] is None  # the base model's own row
    assert cells[10]["paired"] == pytest.approx(EXPECTED)
    client.force_login(researcher)
    page = client.get(f"/evals/compare/?run={run.pk}&benchmark={BENCH}").content.decode()
    shown = _shown(EXPECTED)
    assert _fragment(page) == shown
    assert shown.startswith('<span class="paired gain" title="paired over 300 items: 30 gained, 12 lost">+6.0 [+')
    # the run page's evaluations panel, next to the scores with their own intervals
    panel = client.get(f"/runs/{run.pk}/").content.decode().split('id="run-evals"')[1].split("</table>")[0]
    assert _fragment(panel) == shown
    assert "19.0%</strong> <span class=\"muted\">[" in panel
    # the checkpoint evaluation's page; the base model's has no such column
    job = client.get(f"/evals/jobs/{after.job_id}/").content.decode()
    assert _fragment(job) == shown and "vs base model (paired, points)" in job
    base_page = client.get(f"/evals/jobs/{base.job_id}/").content.decode()
    assert "vs base" not in base_page and "<strong>13.0%</strong>" in base_page  # its score, no paired column
    print("\ncompare view cell:", page.split('id="compare-table"')[1].split("</tr>")[2].strip())
    print("run page panel row:", panel.split("</tr>")[1].strip())


def test_importing_again_stores_the_same_samples_and_takes_a_rewritten_file(db, folder):
    _import(folder)
    run = Run.objects.get()
    before = _sample_rows(run)
    assert "(600 item samples)" in _import(folder)
    assert _sample_rows(run) == before and EvalSample.objects.count() == 2 * N
    # a re-evaluation of step 10 on the first 100 items appends its line and rewrites its file: replaced
    first = [_sample(i, i in AFTER) for i in range(100)]
    append_eval(folder, {"step": 10, "checkpoint": "/gpu/run/checkpoints/step-000010", "benchmark": BENCH,
                         "scoring": "exact", "n": 100, "score": sum(x["score"] for x in first) / 100, "ci_low": 0.0,
                         "ci_high": 1.0, "seconds": 1.0})
    write_eval_samples(folder, BENCH, 10, first)
    _import(folder)
    after = EvalResult.objects.get(job__run=run, job__step=10)
    assert after.samples.count() == 100 and EvalSample.objects.count() == N + 100
    cell = comparison([run], [Benchmark.objects.get(name=BENCH)])["rows"][1]["cells"][0]
    assert cell["paired"] == pytest.approx(paired_difference(
        _scores(BASE), {k: v for k, v in _scores(AFTER).items() if int(k.split("-")[1]) < 100}))
    assert cell["paired"]["n"] == 100


def test_a_bad_samples_line_fails_the_import_and_stores_nothing(db, folder):
    path = folder / "eval_samples" / f"{BENCH}-step10.jsonl"
    good = path.read_text()
    path.write_text(good + json.dumps({"index": N, "score": "right"}) + "\n")
    said = _fails(folder)
    assert said == (f'eval_samples/{BENCH}-step10.jsonl line {N + 1}: "score" must be a number in [0, 1], '
                    "got 'right'")
    assert (Run.objects.count(), EvalResult.objects.count(), EvalSample.objects.count()) == (0, 0, 0)
    path.write_text(good[: len(good) // 2])  # cut off mid-line, as a run stopped while writing it
    assert "not valid JSON" in _fails(folder) and "the line is cut off" in _fails(folder)

    # a folder imported before, with a bad file now: the import fails whole, the samples stay as they were
    path.write_text(good)
    _import(folder)
    run = Run.objects.get()
    before = _sample_rows(run)
    # the base file, rewritten with other items right (same n and score), is read first...
    write_eval_samples(folder, BENCH, 0, [_sample(i, (i + 1) % N in BASE) for i in range(N)])
    path.write_text(good + "{not json}\n")  # ...and step 10's fails
    assert f"eval_samples/{BENCH}-step10.jsonl line {N + 1}: not valid JSON" in _fails(folder)
    assert _sample_rows(run) == before

    path.write_text(good)
    write_eval_samples(folder, BENCH, 20, [_sample(0, True)])  # items of an evaluation evals.jsonl lacks
    assert _fails(folder) == (f"eval_samples/{BENCH}-step20.jsonl: evals.jsonl has no line for benchmark {BENCH} at "
                              "step 20, so these samples belong to no evaluation; append that line (append_eval) or "
                              "move the file out of the folder")


def test_samples_that_do_not_match_their_evals_line_are_refused(db, folder):
    """A samples file from another evaluation (a rerun that rewrote it, a wrong copy) would pair the wrong items:
    its count and mean score must match the evals.jsonl line it belongs to."""
    write_eval_samples(folder, BENCH, 10, [_sample(i, i in AFTER) for i in range(100)])
    assert _fails(folder) == (f"eval_samples/{BENCH}-step10.jsonl: 100 samples with mean score 0.5700, but its "
                              "evals.jsonl line says n=300, score=0.1900: the file is from another evaluation; "
                              "rewrite it with that evaluation's samples (write_eval_samples) or move it out of the "
                              "folder")
    assert EvalSample.objects.count() == 0
    write_eval_samples(folder, BENCH, 10, [_sample(i, i in BASE) for i in range(N)])  # right n, wrong score
    assert "mean score 0.1300" in _fails(folder)
    # a file gone since the last import takes its samples with it
    write_eval_samples(folder, BENCH, 10, [_sample(i, i in AFTER) for i in range(N)])
    _import(folder)
    (folder / "eval_samples" / f"{BENCH}-step10.jsonl").unlink()
    (folder / "eval_samples" / f"._{BENCH}-step0.jsonl").write_text("macOS resource fork")  # a dotfile: ignored
    _import(folder)
    assert EvalSample.objects.filter(result__job__step=10).count() == 0
    assert EvalSample.objects.count() == N


def test_results_scored_or_asked_differently_are_not_paired(db, folder):
    """A base scored exact against a checkpoint scored math (or with another answer budget, or with search) would
    "gain" what the setting changed: no paired difference then."""
    _import(folder)
    run = Run.objects.get()
    bench = Benchmark.objects.get(name=BENCH)
    cell = lambda: comparison([run], [bench])["rows"][1]["cells"][0]  # noqa: E731
    assert cell()["paired"] is not None
    EvalResult.objects.filter(job__run=run, job__step=10).update(scoring="math")
    assert cell()["paired"] is None
    EvalResult.objects.filter(job__run=run, job__step=10).update(scoring="exact")
    EvalJob.objects.filter(run=run, step=10).update(max_new_tokens=1024)
    assert cell()["paired"] is None
    EvalJob.objects.filter(run=run, step=10).update(max_new_tokens=EvalJob.objects.get(run=run, step=None).max_new_tokens,
                                                    search=True)
    assert cell()["paired"] is None


def test_without_the_base_models_samples_no_difference_is_shown(db, folder, client, researcher):
    (folder / "eval_samples" / f"{BENCH}-step0.jsonl").unlink()  # an older folder: only some results have items
    _import(folder)
    run = Run.objects.get()
    assert EvalSample.objects.filter(result__job__run=run).count() == N
    cells = [row["cells"][0] for row in comparison([run], [Benchmark.objects.get(name=BENCH)])["rows"]]
    assert [c["paired"] for c in cells] == [None, None]
    client.force_login(researcher)
    for url in (f"/evals/compare/?run={run.pk}&benchmark={BENCH}", f"/runs/{run.pk}/",
                f"/evals/jobs/{EvalResult.objects.get(job__step=10).job_id}/"):
        html = client.get(url).content.decode()
        assert "19.0%" in html and "vs base</span>" not in html and 'class="paired' not in html


# ---- web evaluations ----------------------------------------------------------------------------

@pytest.fixture
def run(db, researcher, tmp_path):
    run = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", config={"method": "spice"},
                             owner=researcher, status="finished", queue="cpu")
    (tmp_path / "step-000005").mkdir()
    Checkpoint.objects.create(run=run, step=5, path=str(tmp_path / "step-000005"))
    return run


def _evaluated(spec, bench, right: dict, run=None, step=None, ids=True) -> EvalResult:
    """A finished evaluation whose job stored a sample per item ({index: (item id, right)})."""
    job = EvalJob.objects.create(model_spec=spec, run=run, step=step, status="finished", queue="cpu")
    job.benchmarks.add(bench)
    scores = [float(r) for _, r in right.values()]
    lo, hi = bootstrap_ci(scores)
    result = EvalResult.objects.create(job=job, benchmark=bench, scoring="exact", n=len(scores), correct=int(sum(scores)),
                                       score=sum(scores) / len(scores), ci_low=lo, ci_high=hi, complete=True)
    EvalSample.objects.bulk_create([EvalSample(result=result, index=i, item_id=item if ids else "", question="q",
                                               score=float(r), correct=r) for i, (item, r) in right.items()])
    return result


def test_web_evaluations_are_paired_by_item_id_else_by_index(run, client, researcher):
    bench = Benchmark.objects.create(name="qa-heldout", title="QA", kind="upload", scoring="exact")
    base = _evaluated("base:smollm2-135m-instruct", bench, {i: (f"q{i}", i < 10) for i in range(40)})
    # the checkpoint answered the same items in another order: matched by id, not by position
    after = _evaluated("/ckpt/step-5", bench, {39 - i: (f"q{i}", i < 20) for i in range(40)}, run=run, step=5)
    cell = comparison([run], [bench])["rows"][1]["cells"][0]
    by_id = paired_difference({f"q{i}": float(i < 10) for i in range(40)}, {f"q{i}": float(i < 20) for i in range(40)})
    assert cell["paired"] == pytest.approx(by_id) and (by_id["gained"], by_id["lost"], by_id["n"]) == (10, 0, 40)
    assert cell["paired"]["low"] > 0
    client.force_login(researcher)
    panel = client.get(f"/runs/{run.pk}/").content.decode().split('id="run-evals"')[1].split("</table>")[0]
    assert _fragment(panel) == _shown(by_id) == \
        '<span class="paired gain" title="paired over 40 items: 10 gained, 0 lost">+25.0 [' + \
        f'{100 * by_id["low"]:+.1f}, {100 * by_id["high"]:+.1f}] vs base</span>'

    # without item ids (a --limit 30 re-run of the checkpoint): the shared first 30 items, by index
    EvalSample.objects.filter(result=base).update(item_id="")
    limited = _evaluated("/ckpt/step-5", bench, {i: ("", i in (0, 25, 26)) for i in range(30)}, run=run, step=5,
                         ids=False)
    cell = comparison([run], [bench])["rows"][1]["cells"][0]  # the newest evaluation of step 5 wins
    assert cell["job"] == limited.job_id
    assert cell["paired"] == pytest.approx(paired_difference({i: float(i < 10) for i in range(30)},
                                                             {i: float(i in (0, 25, 26)) for i in range(30)}))
    assert (cell["paired"]["n"], cell["paired"]["gained"], cell["paired"]["lost"]) == (30, 2, 9)
    job_page = client.get(f"/evals/jobs/{limited.job_id}/").content.decode()
    assert 'class="paired loss" title="paired over 30 items: 2 gained, 9 lost">-23.3 [' in job_page
    assert after.samples.count() == 40
