"""manage.py eval CHECKPOINT --benchmark NAME [--benchmark NAME ...] [--limit N] [--search] [--corpus NAME]
[--max-new-tokens N] [--enqueue [--queue gpu|cpu]]

Evaluates a checkpoint folder (``var/runs/7/checkpoints/step-000050``) or ``base:<model name>``
in this process (or queues it with --enqueue), records the evaluation like the web does, and prints
one JSON line per benchmark: score, 95% bootstrap interval, n. Exits 1 when the evaluation fails.
"""
from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import CommandError

from apps.accounts.schema import SchemaCommand
from apps.evals.jobs import execute_eval
from apps.evals.launch import EvalLaunchError, launch_eval
from apps.evals.models import Status
from apps.jobs.lifecycle import QueueUnavailable
from apps.runs.models import Checkpoint


class Command(SchemaCommand):
    help = "Evaluate a checkpoint or base:<model name> on benchmarks; prints one JSON line per benchmark."

    def add_arguments(self, parser):
        parser.add_argument("checkpoint", help="A checkpoint folder, or base:<model name> (e.g. base:smollm2-135m-instruct).")
        parser.add_argument("--benchmark", action="append", required=True,
                            help="gsm8k, gpqa-diamond, aime2025, or a held-out / uploaded set (repeatable).")
        parser.add_argument("--limit", type=int, default=None, help="Evaluate the first N items of each benchmark.")
        parser.add_argument("--search", action="store_true", help="Answer with the search tool (multi-turn, pgvector).")
        parser.add_argument("--corpus", default=None, help="Search corpus (default: the checkpoint's run's corpus).")
        parser.add_argument("--max-new-tokens", type=int, default=512, help="Token budget of one answer.")
        parser.add_argument("--enqueue", action="store_true", help="Queue the job for a worker and print its id.")
        parser.add_argument("--queue", choices=["gpu", "cpu"], default=None, help="Queue for --enqueue.")

    def handle(self, *args, checkpoint, benchmark, limit, search, corpus, max_new_tokens, enqueue, queue, **options):
        row = None
        if not checkpoint.startswith("base:"):
            path = str(Path(checkpoint).expanduser().resolve())
            row = Checkpoint.objects.select_related("run").filter(path__in=[checkpoint, path]).first()
        try:
            job = launch_eval(benchmarks=benchmark, model=None if row else checkpoint, checkpoint=row,
                              limit=limit, search=search, corpus=corpus, queue=queue or ("cpu" if not enqueue else None),
                              max_new_tokens=max_new_tokens, web=False, enqueue_job=enqueue)
        except EvalLaunchError as exc:
            raise CommandError(f"{exc.field or 'eval'}: {exc}") from None
        except QueueUnavailable as exc:
            raise CommandError(str(exc)) from None
        if enqueue:
            self.stdout.write(str(job.pk))
            return
        execute_eval(job.pk)
        job.refresh_from_db()
        for result in job.results.select_related("benchmark"):
            self.stdout.write(json.dumps({"job": job.pk, "model": job.model_spec, **result.as_dict()}))
        if job.status != Status.FINISHED:
            raise CommandError(f"evaluation {job.pk} {job.status}: {job.error}")
