"""`manage.py ingest CORPUS PATH...`: ingest files (.txt .md .html .jsonl .pdf .zip) now, in this process.
The corpus is created when it does not exist. A refused file is reported and the others go on;
the exit status is non-zero when any file was refused."""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from apps.accounts.schema import SchemaCommand
from apps.corpora.embedder import EmbedderError
from apps.corpora.jobs import run_ingest
from apps.corpora.models import Corpus
from apps.corpora.parsing import IngestError, parse_file
from apps.corpora.uploads import check_size, create_corpus


class Command(SchemaCommand):
    help = "Ingest files into a corpus (created if missing)."

    def add_arguments(self, parser):
        parser.add_argument("corpus", help="corpus name or id")
        parser.add_argument("paths", nargs="+", help="files: .txt .md .html .jsonl .pdf or .zip")

    def handle(self, *args, corpus, paths, **options):
        row = Corpus.objects.filter(pk=int(corpus)).first() if corpus.isdigit() else Corpus.objects.filter(name=corpus).first()
        if row is None:
            try:
                row = create_corpus(corpus)
            except (IngestError, EmbedderError) as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"created corpus {row.name!r} (id {row.pk})")
        refused = 0
        for name in paths:
            path = Path(name)
            try:
                if not path.is_file():
                    raise IngestError(f"{name}: no such file.")
                check_size(path.stat().st_size)
                parsed = parse_file(path.read_bytes(), path.name)
            except IngestError as exc:
                self.stderr.write(f"refused: {exc}")
                refused += 1
                continue
            row.queue_ingest()
            result = run_ingest(row, parsed.documents, parsed.errors)
            if result.get("error"):
                raise CommandError(result["error"])
            for problem in parsed.errors:
                self.stderr.write(f"skipped: {problem}")
            self.stdout.write(f"{name}: +{result['documents']} documents, +{result['chunks']} chunks, "
                              f"{result['skipped_duplicates']} duplicates skipped")
        row.refresh_from_db()
        self.stdout.write(f"corpus {row.name!r}: {row.doc_count} documents, {row.chunk_count} chunks")
        if refused:
            raise CommandError(f"{refused} file(s) refused; see above.")
