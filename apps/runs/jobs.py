"""The RQ job of runs: ``execute_run`` (queues gpu / cpu).

``execute_run(run_id)`` is ``run_job`` of the shared job layer (apps/jobs/lifecycle.py: the claim,
the heartbeat thread, the failure recording shared with the eval jobs) over ``_execute``:
1. claims the run atomically (queued -> running; any other status: nothing to do);
2. builds the trainer config (run folder ``settings.RUNS_DIR/<id>``), a ``DjangoSink``, and
   the corpus's pgvector retriever and document source (``train.gpus`` > 1: one process per GPU
   through torchrun, apps/runs/ranks.py);
3. calls ``trainer.run(...)``, resuming from the newest checkpoint in the run folder if any,
   while a background thread keeps ``heartbeat_at`` fresh;
4. records how it ended: finished, paused / cancelled (asked for, honoured at a step
   boundary), or failed (``error`` = the exception's message; the traceback goes to
   ``<run_dir>/run.log``). A run the reaper already marked failed is left as it is.
"""
from __future__ import annotations

import logging
import os
import traceback
from pathlib import Path

from django.conf import settings

from apps.corpora.retriever import PgDocumentSource, PgvectorRetriever
from apps.jobs.lifecycle import JobKind, run_job
from apps.runs.models import IllegalTransition, Run, Status
from apps.runs.ranks import train_ranks
from apps.runs.sealed import open_for_worker
from apps.runs.sink import DjangoSink, with_db_retry
from trainer.paths import ENV as DATASETS_ENV

log = logging.getLogger("selfplay.runs")


def execute_run(run_id: int) -> str:
    return run_job(RUN_JOB, run_id, _execute)


def _execute(run: Run):
    os.environ.setdefault("SELFPLAY_DATA_DIR", str(settings.DATA_DIR))
    # the trainer (and the GPU ranks, which inherit it) reads config files only from the datasets folder
    os.environ[DATASETS_ENV] = str(settings.DATASETS_DIR)
    sink = DjangoSink(run)
    try:
        run_dir = Path(run.run_dir or Path(settings.RUNS_DIR) / str(run.pk))
        run_dir.mkdir(parents=True, exist_ok=True)
        with _RunLog(run_dir / "run.log") as runlog:
            try:
                result = _train(run, run_dir, sink, runlog.stream)
                sink.close()
            except Exception:
                runlog.stream.write(traceback.format_exc())
                raise
    except Exception:
        _close_quietly(sink)
        raise
    return result


def _train(run: Run, run_dir: Path, sink: DjangoSink, stream):
    from trainer import run as train
    from trainer.checkpoint import latest_checkpoint
    from trainer.config import load_config
    from trainer.sink import ConsoleSink, MultiSink

    cfg = load_config(_config_for_worker(run))
    retriever, documents = corpus_tools(run)
    latest = latest_checkpoint(run_dir)
    resume = latest is not None
    if resume:
        _record_unreported(run, sink, latest)
        run.notable(f"resuming from {latest.name}")
    if cfg.train.gpus > 1:  # one process per GPU; rank 0 reports through its own DjangoSink
        return train_ranks(run, run_dir, cfg, stream, resume)
    both = MultiSink(sink, ConsoleSink(cfg.train.steps, stream=stream))
    try:
        return train(cfg, sink=both, retriever=retriever, documents=documents, run_dir=run_dir, resume=resume)
    finally:
        if retriever is not None:
            retriever.close()  # its search threads' connections


def _record_unreported(run: Run, sink: DjangoSink, checkpoint: Path) -> None:
    """A checkpoint written whole in the background just before its worker died was never reported (the step loop
    hears of a background write at the next step's end): the resume starts from it, so the run lists it too."""
    from trainer.checkpoint import STEP_DIR

    step = int(STEP_DIR.match(checkpoint.name).group(1))
    if not run.checkpoints.filter(step=step).exists():
        sink.checkpoint(step, str(checkpoint), earlier=True)


def _config_for_worker(run: Run) -> dict:
    """The stored config; a model named by folder resolves against this server's models dir; a
    sealed API key is opened into this process's environment (the trainer gets env:NAME)."""
    cfg = open_for_worker(dict(run.config), run.pk)
    name = (cfg.get("model") or {}).get("name_or_path", "")
    local = Path(settings.MODELS_DIR) / name
    if name and "/" not in name and (local / "config.json").is_file():
        cfg["model"] = {**cfg["model"], "name_or_path": str(local)}
    return cfg


def corpus_tools(run: Run):
    """(retriever, document source) over the run's corpus, or (None, None) without one."""
    if run.corpus_id is None:
        if run.corpus_name:
            raise RuntimeError(f"the run's corpus {run.corpus_name!r} was deleted; launch a new run on another corpus")
        return None, None
    return PgvectorRetriever(run.corpus), PgDocumentSource(run.corpus)


def _ended(run: Run, result) -> str:
    run.refresh_from_db()
    if run.status != Status.RUNNING:
        return f"run {run.pk} is {run.status} (changed while it ran)"
    try:
        if run.requested == "cancel" and result.stopped:
            run.mark_cancelled(f"cancelled at step {result.steps}")
        elif run.requested == "pause" and result.stopped:
            run.mark_paused()
        else:
            run.mark_finished(f"finished {result.steps} steps")
    except IllegalTransition as exc:
        return str(exc)
    return f"run {run.pk} {run.status} at step {result.steps}"


def _failed(run: Run, message: str) -> None:
    with_db_retry("recording the failure", run.refresh_from_db)  # the error may have been a lost connection
    if run.status == Status.RUNNING:
        try:
            run.mark_failed(message, resumable=bool(run.checkpoint_path))
        except IllegalTransition:
            pass  # the reaper or a person got there first


def _close_quietly(sink: DjangoSink) -> None:
    try:
        sink.close()
    except Exception as exc:
        log.warning("could not flush the last reports of run %s: %s", sink.run_id, exc)


RUN_JOB = JobKind("run", Run, claim=Run.mark_running, fail=_failed, succeed=_ended)


class _RunLog:
    """``<run_dir>/run.log``: progress lines, the selfplay/trainer loggers and any traceback."""

    LOGGERS = ("selfplay", "trainer")

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.stream = open(self.path, "a", encoding="utf-8", buffering=1)
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self.handler)
        self.stream.close()

