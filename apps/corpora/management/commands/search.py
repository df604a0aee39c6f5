"""`manage.py search CORPUS "query" [-k 5] [--mode hybrid|dense|lexical] [--json]`."""
from __future__ import annotations

import json

from django.core.management.base import CommandError

from apps.accounts.schema import SchemaCommand
from apps.corpora.embedder import EmbedderError
from apps.corpora.models import Corpus
from apps.corpora.search import MODES, SearchError, search


class Command(SchemaCommand):
    help = "Search a corpus and print the top passages."

    def add_arguments(self, parser):
        parser.add_argument("corpus", help="corpus name or id")
        parser.add_argument("query")
        parser.add_argument("-k", type=int, default=5, help="how many results (default 5)")
        parser.add_argument("--mode", choices=MODES, default="hybrid", help="default hybrid")
        parser.add_argument("--json", action="store_true", help='print {"results": [...]} like the API')

    def handle(self, *args, corpus, query, k, mode, json: bool, **options):
        row = Corpus.objects.filter(pk=int(corpus)).first() if corpus.isdigit() else Corpus.objects.filter(name=corpus).first()
        if row is None:
            names = ", ".join(Corpus.objects.values_list("name", flat=True)) or "none yet: run load_wikipedia"
            raise CommandError(f"no corpus {corpus!r} (corpora: {names}).")
        try:
            hits = search(row, query, k, mode)
        except (SearchError, EmbedderError) as exc:
            raise CommandError(str(exc)) from None
        if json:
            self.stdout.write(_dumps({"results": [h.to_dict() for h in hits]}))
            return
        if not hits:
            self.stdout.write("no results")
        for rank, h in enumerate(hits, start=1):
            text = " ".join(h.text.split())
            self.stdout.write(f"{rank}. {h.title}  (score {h.score:.4f}, document {h.document_id}, chunk {h.chunk_id})")
            self.stdout.write(f"   {text[:300]}{'…' if len(text) > 300 else ''}")


_dumps = json.dumps
