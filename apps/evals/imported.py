"""An imported run folder's checkpoint evaluations (the run import hook, apps/runs/hooks.py).

``manage.py import_run`` (apps/runs/importer.py) calls ``import_evaluations(run, folder)`` inside
its transaction. evals.jsonl (trainer/runfolder.py) becomes one finished ``EvalJob`` per step
(step 0: ``base:<the run's model>``, like a base evaluation launched from the run page) with an
``EvalResult`` per benchmark, and crossplay.json a finished ``CrossPlay`` (its columns may differ
from its rows), all on queue ``imported``, so the run page, /evals/ and the compare view show them.
A benchmark name this site does not know becomes a ``Benchmark`` of kind ``imported`` (scores
only; no items, so it cannot be evaluated again). Each is an upsert on (run, step[, benchmark]):
importing again replaces, never duplicates. A record's ``train_seconds`` (the run's training time at
that checkpoint) is kept on its result for the runs compare view's time-to-accuracy chart. The items
of eval_samples/<benchmark>-step<N>.jsonl become the ``EvalSample`` rows of the result of that line
(replacing the result's samples, so importing again changes nothing), from which the evals pages pair
a checkpoint's items with the base model's (apps/evals/compare.py ``paired``). A bad line, or a
samples file with no evals.jsonl line, raises ``RunFolderError``.
"""
from __future__ import annotations

from pathlib import Path

from django.utils import timezone

from apps.evals.benchmarks import ensure_builtins
from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult, EvalSample, Status
from apps.runs.importer import IMPORTED_QUEUE
from apps.runs.models import Run
from trainer.runfolder import (
    EVAL_SAMPLES,
    EVALS,
    RunFolderError,
    eval_sample_files,
    read_crossplay,
    read_eval_samples,
    read_evals,
)

BINARY_SCORING = ("math", "mcq", "exact")  # a sample scores 0 or 1: correct = score * n


def import_evaluations(run: Run, folder: Path) -> dict:
    """The evaluations, their samples and the cross-play of the run folder as rows of ``run``;
    {"evals": n, "eval_samples": n, "crossplay": bool}."""
    when = timezone.now()  # when they arrived here (the folder does not say when they ran)
    records = read_evals(folder)
    crossplay = read_crossplay(folder)
    results = _import_evals(run, records, when)
    samples = _import_samples(folder, results)
    if crossplay is not None:
        _import_crossplay(run, crossplay, when)
    return {"evals": len(records), "eval_samples": samples, "crossplay": crossplay is not None}


def _benchmark(record: dict, run: Run) -> Benchmark:
    bench = Benchmark.objects.filter(name=record["benchmark"]).first()
    if bench is None:
        bench = Benchmark.objects.create(
            name=record["benchmark"], title=record["benchmark"], kind=Benchmark.Kind.IMPORTED,
            scoring=record["scoring"], size=record["n"], meta={"imported_from": run.imported_from},
            description=f"Scores imported with run {run.pk} ({run.imported_from}); each imported evaluation keeps "
                        "the answered items its folder recorded (eval_samples/), but the benchmark's questions file "
                        "is not stored here, so it cannot be evaluated again here.")
    elif bench.kind == Benchmark.Kind.IMPORTED and record["n"] > bench.size:
        Benchmark.objects.filter(pk=bench.pk).update(size=record["n"])
    return bench


def _import_evals(run: Run, records: list[dict], when) -> dict[tuple[int, str], EvalResult]:
    """One finished EvalJob per step of evals.jsonl (step 0: the base model), a result per benchmark;
    (step, benchmark) -> its result."""
    if not records:
        return {}
    results = {}
    ensure_builtins()
    by_step: dict[int, list[dict]] = {}
    for record in records:
        by_step.setdefault(record["step"], []).append(record)
    checkpoints = {c.step: c for c in run.checkpoints.all()}
    for step, rows in sorted(by_step.items()):
        base = step == 0
        spec = f"base:{run.model_name}" if base else rows[0]["checkpoint"]
        total = sum(r["n"] for r in rows)
        job, _ = EvalJob.objects.update_or_create(
            run=run, queue=IMPORTED_QUEUE, step=None if base else step,
            defaults={"model_spec": spec[:1000], "checkpoint": None if base else checkpoints.get(step),
                      "label": (spec if base else f"run {run.pk} @ step {step}")[:300] + " (imported)",
                      "status": Status.FINISHED, "worker_name": "import_run", "error": "", "done": total,
                      "total": total, "started_at": when, "finished_at": when, "heartbeat_at": when,
                      "max_new_tokens": run.config.get("rollout", {}).get("max_new_tokens", 512)
                      if isinstance(run.config, dict) else 512})
        for r in rows:
            bench = _benchmark(r, run)
            correct = r.get("correct")
            if isinstance(correct, bool) or not isinstance(correct, int):
                correct = round(r["score"] * r["n"]) if r["scoring"] in BINARY_SCORING else 0
            results[(step, bench.name)], _ = EvalResult.objects.update_or_create(job=job, benchmark=bench, defaults={
                "scoring": r["scoring"], "n": r["n"], "correct": correct, "score": r["score"], "ci_low": r["ci_low"],
                "ci_high": r["ci_high"], "seconds": r["seconds"], "train_seconds": r.get("train_seconds"),
                "complete": True})
            job.benchmarks.add(bench)
    return results


def _import_samples(folder: Path, results: dict[tuple[int, str], EvalResult]) -> int:
    """eval_samples/<benchmark>-step<N>.jsonl as the samples of the result of (N, benchmark), replacing its
    samples; how many were stored. One file in memory at a time; a bad line fails the whole import."""
    stored, seen = 0, set()
    for benchmark, step, path in eval_sample_files(folder):
        result = results.get((step, benchmark))
        if result is None:
            raise RunFolderError(f"{EVAL_SAMPLES}/{path.name}: {EVALS} has no line for benchmark {benchmark} at step "
                                 f"{step}, so these samples belong to no evaluation; append that line (append_eval) "
                                 "or move the file out of the folder")
        samples = read_eval_samples(path)
        mean = sum(s["score"] for s in samples) / len(samples) if samples else None
        if len(samples) != result.n or mean is None or abs(mean - result.score) > 1e-3:
            raise RunFolderError(
                f"{EVAL_SAMPLES}/{path.name}: {len(samples)} samples with mean score "
                f"{'-' if mean is None else f'{mean:.4f}'}, but its {EVALS} line says n={result.n}, "
                f"score={result.score:.4f}: the file is from another evaluation; rewrite it with that evaluation's "
                "samples (write_eval_samples) or move it out of the folder")
        result.samples.all().delete()
        EvalSample.objects.bulk_create([EvalSample.from_sample(result, s) for s in samples], batch_size=1000)
        stored += len(samples)
        seen.add(result.pk)
    # a result imported before with samples whose file is gone keeps none (they would pair with the new scores)
    EvalSample.objects.filter(result__in=[r for r in results.values() if r.pk not in seen]).delete()
    return stored


def _import_crossplay(run: Run, data: dict, when) -> None:
    checkpoints = {c.step: c for c in run.checkpoints.all()}

    def side(labels, steps):
        return [{"id": checkpoints[s].pk if s in checkpoints else None, "step": s,
                 "path": checkpoints[s].path if s in checkpoints else "", "label": label}
                for label, s in zip(labels, steps)]

    matrix = data["pass_rate"]
    CrossPlay.objects.update_or_create(run=run, queue=IMPORTED_QUEUE, defaults={
        "status": Status.FINISHED, "checkpoints": side(data["challengers"], data["steps_challenger"]),
        "reasoners": side(data["reasoners"], data["steps_reasoner"]), "matrix": matrix, "counts": data["n"],
        "cells_done": sum(v is not None for row in matrix for v in row), "n_tasks": 0, "answers_per_task": 0,
        "tasks": [], "worker_name": "import_run", "error": "", "started_at": when, "finished_at": when,
        "heartbeat_at": when})
