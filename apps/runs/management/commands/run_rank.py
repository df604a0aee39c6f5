"""``manage.py run_rank LAUNCH_JSON``: one rank of a multi-GPU run, started by the run job's
launcher (``torchrun --nproc_per_node N manage.py run_rank ...``; see apps/runs/ranks.py).

Every rank reads the run's corpus from Postgres (its documents and the pgvector retriever); rank 0
alone reports through the ``DjangoSink`` (metrics, samples, checkpoints, control) and writes
``result.json`` in the run folder for the job that launched it.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run one rank of a multi-GPU run (started by the run job, not by hand)."

    def add_arguments(self, parser):
        parser.add_argument("launch", help="the launch file the run job wrote (run folder/launch.json)")

    def handle(self, *args, **opts):
        from apps.runs.ranks import run_this_rank

        spec = json.loads(Path(opts["launch"]).read_text())
        try:
            run_this_rank(spec)
        except Exception as exc:  # the job that launched us reads stderr into the run's error
            traceback.print_exc()
            print(f"RANK-ERROR: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            sys.exit(1)
