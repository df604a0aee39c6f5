"""``manage.py run_rank LAUNCH_JSON``: one rank of a multi-GPU run, started by the run job's
launcher (``torchrun --nproc_per_node N manage.py run_rank ...``; see apps/runs/ranks.py).

Every rank reads the run's corpus from Postgres (its documents and the pgvector retriever); rank 0
alone reports through the ``DjangoSink`` (metrics, samples, checkpoints, control) and writes
``result.json`` in the run folder for the job that launched it.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from django.core.management.base import BaseCommand

from apps.jobs.processes import die_with_parent
from apps.runs.jobs import corpus_tools
from apps.runs.models import Run
from apps.runs.ranks import ERROR_MARK
from apps.runs.sink import DjangoSink


class Command(BaseCommand):
    help = "Run one rank of a multi-GPU run (started by the run job, not by hand)."

    def add_arguments(self, parser):
        parser.add_argument("launch", help="the launch file the run job wrote (run folder/launch.json)")

    def handle(self, *args, **opts):
        # torchrun (our parent) killed outright cannot stop us: end with it, freeing the GPU memory we hold
        die_with_parent(os.getppid())
        spec = json.loads(Path(opts["launch"]).read_text())
        try:
            run_this_rank(spec)
        except Exception as exc:  # the job that launched us reads stderr into the run's error
            traceback.print_exc()
            print(f"{ERROR_MARK}{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            sys.exit(1)


def run_this_rank(spec: dict) -> None:
    """The body of one rank."""
    from trainer import distributed as dist
    from trainer import run as train
    from trainer.config import load_config

    run = Run.objects.get(pk=spec["run_id"])
    cfg = load_config(spec["config"])
    retriever, documents = corpus_tools(run)
    sink = DjangoSink(run) if dist.rank() == 0 else None
    result = train(cfg, sink=sink, retriever=retriever, documents=documents, run_dir=spec["run_dir"],
                   resume=spec["resume"])
    if sink is not None:
        sink.close()
    if dist.is_main():
        Path(spec["run_dir"], "result.json").write_text(json.dumps(
            {"steps": result.steps, "stopped": result.stopped, "final_checkpoint": result.final_checkpoint,
             "step_seconds": result.step_seconds}))
