"""The trainer's search tool and document source over a Postgres corpus.

`PgvectorRetriever(corpus)` implements trainer.tools.retriever.Retriever:
`search(queries, k) -> list[list[Passage]]` (one batched search per call, hybrid by default).
`PgDocumentSource(corpus)` implements the trainer's DocumentSource: `sample(n, rng)` returns
n documents (id, title, text) drawn uniformly by the given random.Random / numpy Generator.
The runs engineer injects both into `trainer.run(..., retriever=..., documents=...)`.
"""
from __future__ import annotations

import random

import numpy as np
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
    """Uniform random documents of a corpus (SPICE's challenger reads one per task).

    The corpus's document ids are read once and kept: a step draws from them with one cheap look-up
    (the corpus row's ``doc_count``) and one query for the drawn documents, instead of reading every
    id of the corpus each call (1M ids at paper scale; benchmarks/search_share.py). An ingest adds
    documents and bumps ``doc_count`` in the same transaction (apps/corpora/ingest.py), and documents
    are never removed one by one (only with their corpus), so a changed count means new documents:
    the ids are read again. ``invalidate()`` forces that too.
    """

    def __init__(self, corpus):
        self.corpus = _corpus(corpus)
        self._ids: np.ndarray | None = None  # ascending document ids
        self._count: int | None = None  # the corpus's doc_count when they were read
        self.id_reads = 0  # how many times the ids were read (a metric for tests and benchmarks)

    def invalidate(self) -> None:
        """Read the ids again at the next call (after documents were added outside an ingest)."""
        self._ids = self._count = None

    def _document_ids(self) -> np.ndarray:
        # the count first: ids read after it are at least as new, so a stale cache is never kept
        count = Corpus.objects.filter(pk=self.corpus.pk).values_list("doc_count", flat=True).first()
        if self._ids is None or count != self._count:
            ids = DocumentRow.objects.filter(corpus=self.corpus).order_by("id").values_list("id", flat=True)
            self._ids, self._count = np.fromiter(ids.iterator(chunk_size=20_000), dtype=np.int64), count
            self.id_reads += 1
        return self._ids

    def __len__(self) -> int:
        _drop_dead_connection()
        return len(self._document_ids())

    def sample(self, n: int, rng=None) -> list[Document]:
        _drop_dead_connection()
        ids = self._document_ids()
        if not len(ids) or n <= 0:
            return []
        rng = rng if rng is not None else random.Random()
        if hasattr(rng, "sample"):  # random.Random: the same draws as rng.sample(ids, n) on a list of the ids
            picks = rng.sample(range(len(ids)), n) if n <= len(ids) else [rng.randrange(len(ids)) for _ in range(n)]
        else:  # numpy Generator
            picks = rng.choice(len(ids), size=n, replace=n > len(ids))
        chosen = [int(ids[int(i)]) for i in picks]
        rows = {d.id: d for d in DocumentRow.objects.filter(id__in=set(chosen)).only("id", "title", "text")}
        return [Document(id=str(i), title=rows[i].title, text=rows[i].text) for i in chosen]
