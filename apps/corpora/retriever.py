"""The trainer's search tool and document source over a Postgres corpus.

`PgvectorRetriever(corpus)` implements trainer.tools.retriever.Retriever:
`search(queries, k) -> list[list[Passage]]` (one batched search per call, hybrid by default).
`PgDocumentSource(corpus)` implements the trainer's DocumentSource: `sample(n, rng)` returns
n documents (id, title, text) drawn uniformly by the given random.Random / numpy Generator.
The runs engineer injects both into `trainer.run(..., retriever=..., documents=...)`.
"""
from __future__ import annotations

import random

from django.db import connection

from apps.corpora.models import Corpus, Document as DocumentRow
from apps.corpora.search import search_many
from trainer.tools import Document, Passage


def _corpus(corpus) -> Corpus:
    if isinstance(corpus, Corpus):
        return corpus
    if isinstance(corpus, int) or (isinstance(corpus, str) and corpus.isdigit()):
        return Corpus.objects.get(pk=int(corpus))
    return Corpus.objects.get(name=corpus)


def _drop_dead_connection() -> None:
    """Long-running training jobs: reconnect if the server closed the connection since the last call."""
    if connection.connection is not None and not connection.in_atomic_block and not connection.is_usable():
        connection.close()


class PgvectorRetriever:
    """Batched hybrid (or dense / lexical) search over one corpus, returning the trainer's Passages."""

    def __init__(self, corpus, mode: str = "hybrid"):
        self.corpus = _corpus(corpus)
        self.mode = mode

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        _drop_dead_connection()
        answers: list[list[Passage]] = [[] for _ in queries]
        asked = [i for i, q in enumerate(queries) if q and q.strip()]  # an empty query finds nothing
        if not asked:
            return answers
        hits = search_many(self.corpus, [queries[i][:2000] for i in asked], k, self.mode)
        for i, row in zip(asked, hits):
            answers[i] = [Passage(document_id=str(h.document_id), chunk_id=str(h.chunk_id), title=h.title,
                                  text=h.text, score=h.score) for h in row]
        return answers


class PgDocumentSource:
    """Uniform random documents of a corpus (SPICE's challenger reads one per task)."""

    def __init__(self, corpus):
        self.corpus = _corpus(corpus)

    def __len__(self) -> int:
        return DocumentRow.objects.filter(corpus=self.corpus).count()

    def sample(self, n: int, rng=None) -> list[Document]:
        _drop_dead_connection()
        ids = list(DocumentRow.objects.filter(corpus=self.corpus).order_by("id").values_list("id", flat=True))
        if not ids or n <= 0:
            return []
        rng = rng if rng is not None else random.Random()
        if hasattr(rng, "sample"):  # random.Random
            chosen = rng.sample(ids, n) if n <= len(ids) else [rng.choice(ids) for _ in range(n)]
        else:  # numpy Generator
            chosen = [ids[int(i)] for i in rng.choice(len(ids), size=n, replace=n > len(ids))]
        rows = {d.id: d for d in DocumentRow.objects.filter(id__in=chosen).only("id", "title", "text")}
        return [Document(id=str(i), title=rows[i].title, text=rows[i].text) for i in chosen]
