"""RQ jobs of evals (queue gpu, or short for the CPU: never behind a training run): ``execute_eval``
and ``execute_crossplay``.

``execute_eval(job_id)`` claims the job (queued -> running), loads the model once, and for each
benchmark in turn answers its items (``trainer.evaluate.evaluate``), writing the samples of every
batch as they come, then the result with its 95% bootstrap interval. A job cancelled while running
(``JobMixin.cancel``) stops before its next item (its next batch on a GPU) and keeps the samples and
the score of what it answered (that result marked incomplete); a cross-play stops before its next
cell and keeps the cells it filled. ``execute_crossplay(id)``
writes each chosen checkpoint's SPICE tasks from the run's corpus documents, then fills the
matrix cell by cell (solver j on challenger i's tasks), saving after every cell.

Both are ``run_job`` of the shared job layer (apps/jobs/lifecycle.py, as the run jobs): the atomic
claim, a heartbeat thread while the job computes, failures recorded on the row (``error``; a job
never crashes its worker). A worker that dies leaves the row running without a heartbeat; the periodic
reaper (and every read of the evals pages or API) fails it with an error naming the worker.
"""
from __future__ import annotations

import logging
import math
import random

from django.conf import settings
from django.db import transaction

from apps.corpora.retriever import PgDocumentSource, PgvectorRetriever
from apps.evals.launch import CPU_EVAL_QUEUE
from apps.evals.models import CrossPlay, EvalJob, EvalResult, EvalSample
from apps.jobs.lifecycle import JobKind, run_job

log = logging.getLogger("selfplay.evals")


def _kind(noun: str, model: type) -> JobKind:
    def succeed(job, _result) -> str:
        job.finish()  # no change to a cancelled row
        return f"{noun} {job.pk} {job.status}"

    return JobKind(noun, model, claim=model.claim, fail=model.fail, succeed=succeed)


EVAL_JOB = _kind("eval", EvalJob)
CROSSPLAY_JOB = _kind("cross-play", CrossPlay)


def _allowed_dirs() -> list:
    return [settings.MODELS_DIR]


def _load(spec: str):
    """A model as the web resolves it: bare names may be folders of the models directory."""
    from trainer.evaluate import load_model

    return load_model(spec, allowed_dirs=_allowed_dirs(), local_models=settings.MODELS_DIR)


def _finite(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# Items answered at once. On the CPU one at a time: a cancelled evaluation stops at the next item, and
# the progress counts every answer as it comes; on a GPU a batch of 16 keeps it busy.
CPU_BATCH, GPU_BATCH = 1, 16


def execute_eval(job_id: int) -> str:
    return run_job(EVAL_JOB, job_id, _evaluate)


def _evaluate(job: EvalJob) -> None:
    from trainer.evaluate import evaluate, frozen_judge
    from trainer.rollout import SamplingParams

    benches = list(job.benchmarks.order_by("name"))
    plan = [(b, _items(b, job.limit)) for b in benches]
    job.beat(total=sum(len(items) for _, items in plan), done=0)
    loaded = _load(job.model_spec)
    tool = _search_tool(job, loaded.tokenizer) if job.search else None
    judge = None
    sampling = SamplingParams(temperature=0.0, max_new_tokens=job.max_new_tokens)
    done = 0
    for bench, items in plan:
        if bench.scoring == "judge" or any(i.scoring == "judge" for i in items):
            judge = judge or frozen_judge(loaded, allowed_dirs=_allowed_dirs(), local_models=settings.MODELS_DIR)
        result, _ = EvalResult.objects.update_or_create(job=job, benchmark=bench, defaults={
            "scoring": bench.scoring, "n": 0, "correct": 0, "score": None, "ci_low": None, "ci_high": None,
            "complete": False})
        result.samples.all().delete()

        def store(samples, n_done, n_total, result=result, offset=done):
            EvalSample.objects.bulk_create([EvalSample.from_sample(result, s) for s in samples])
            job.beat(done=offset + n_done)
            EvalResult.objects.filter(pk=result.pk).update(n=n_done)

        out = evaluate(loaded.generator, loaded.tokenizer, items, bench.scoring, sampling=sampling, search_tool=tool,
                       judge=judge, on_batch=store, name=bench.name, should_stop=job.cancelled,
                       batch_size=CPU_BATCH if job.queue == CPU_EVAL_QUEUE else GPU_BATCH)
        done += len(items)
        stopped = out.n < len(items)  # cancelled: the items answered so far are scored, marked incomplete
        if out.n:
            EvalResult.objects.filter(pk=result.pk).update(
                n=out.n, correct=out.correct, score=_finite(out.score), ci_low=_finite(out.ci_low),
                ci_high=_finite(out.ci_high), seconds=out.seconds, complete=not stopped)
        if stopped or job.cancelled():
            if not out.n:
                result.delete()  # nothing answered for this benchmark
            return


def _items(bench, limit):
    items = bench.items()
    if bench.size != len(items):
        type(bench).objects.filter(pk=bench.pk).update(size=len(items))
    return items[:limit] if limit else items


def _search_tool(job: EvalJob, tokenizer):
    from trainer.tools.search import SearchTool

    if job.corpus_id is None:
        raise RuntimeError("the search corpus of this evaluation was deleted; launch it again with another corpus")
    return SearchTool(PgvectorRetriever(job.corpus), tokenizer=tokenizer)


# ---- cross-play ---------------------------------------------------------------------------------

def execute_crossplay(crossplay_id: int) -> str:
    return run_job(CROSSPLAY_JOB, crossplay_id, _crossplay)


def _crossplay(job: CrossPlay) -> None:
    """Tasks of every challenger first (one model in memory at a time), then the cells row by row."""
    import torch

    from trainer.evaluate import challenger_tasks, solve_rate, spice_section
    from trainer.rollout import SamplingParams

    run = job.run
    if run.corpus_id is None:
        raise RuntimeError("the run's corpus was deleted; cross-play needs its documents")
    section = spice_section((run.config or {}).get("spice") or {})
    sampling = SamplingParams(temperature=job.temperature, max_new_tokens=job.max_new_tokens)
    documents = _documents(run, job.n_tasks * 4, job.seed)
    torch.manual_seed(job.seed)
    n = len(job.checkpoints)
    tasks = list(job.tasks) if len(job.tasks) == n else [None] * n
    for i, ckpt in enumerate(job.checkpoints):
        if job.cancelled():
            return
        if tasks[i] is None:
            loaded = _load(ckpt["path"])
            written, tried = challenger_tasks(loaded, documents, job.n_tasks, sampling, section)
            tasks[i] = {"step": ckpt["step"], "tasks": written, "attempts": tried}
            CrossPlay.objects.filter(pk=job.pk).update(tasks=tasks)
            del loaded
    matrix = [list(row) for row in job.matrix] if len(job.matrix) == n else [[None] * n for _ in range(n)]
    done = 0
    for j, ckpt in enumerate(job.checkpoints):  # one solver loaded at a time answers every challenger's tasks
        if job.cancelled():
            return  # the cells computed so far stay
        loaded = _load(ckpt["path"])
        for i in range(n):
            if job.cancelled():
                return
            rate, _ = solve_rate(loaded, tasks[i]["tasks"], sampling, job.answers_per_task)
            matrix[i][j] = rate
            done += 1
            with transaction.atomic():
                CrossPlay.objects.filter(pk=job.pk).update(matrix=matrix, cells_done=done)
            job.beat()
        del loaded


def _documents(run, n: int, seed: int):
    source = PgDocumentSource(run.corpus)
    docs = source.sample(max(n, 1), random.Random(seed))
    if not docs:
        raise RuntimeError(f"corpus {run.corpus.name!r} has no documents")
    return docs
