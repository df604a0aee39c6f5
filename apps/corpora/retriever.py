"""The trainer's search tool and document source over a Postgres corpus.

`PgvectorRetriever(corpus)` implements trainer.tools.retriever.Retriever:
`search(queries, k) -> list[list[Passage]]` (one batched search per call, dense by default).
`PgDocumentSource(corpus)` implements the trainer's DocumentSource: `sample(n, rng)` returns
n documents (id, title, text) drawn uniformly by the given random.Random / numpy Generator.
The runs engineer injects both into `trainer.run(..., retriever=..., documents=...)`.
"""
from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from django.db import DEFAULT_DB_ALIAS, connection, connections

from apps.corpora.embedder import embedder_for
from apps.corpora.models import Corpus, Document as DocumentRow
from apps.corpora.search import search_many, validate
from trainer.tools import Document, Passage


def _corpus(corpus) -> Corpus:
    if isinstance(corpus, Corpus):
        return corpus
    if isinstance(corpus, int) or (isinstance(corpus, str) and corpus.isdecimal()):
        return Corpus.objects.get(pk=int(corpus))
    return Corpus.objects.get(name=corpus)


def _drop_dead_connection() -> None:
    """Long-running training jobs: reconnect if the server closed the connection since the last call."""
    if connection.connection is not None and not connection.in_atomic_block and not connection.is_usable():
        connection.close()


def search_workers() -> int:
    """Database connections one large search batch is spread over: SELFPLAY_SEARCH_WORKERS (checked at
    start-up in settings), else the machine's cores (at most 8). A rollout turn's searches wait for all
    of them while the GPU idles, so the batch uses every core (benchmarks/search_share.py)."""
    from django.conf import settings

    return settings.SEARCH_WORKERS


class PgvectorRetriever:
    """Batched search over one corpus, returning the trainer's Passages: dense (by meaning) by default.

    Dense, as the papers' retrievers (SSP and Search-R1 search with E5 embeddings): the hybrid mode's
    lexical half ranks every chunk that holds any word of the query, ~10% of a corpus, so at 1M chunks
    one query took 1.35 s on average (up to 6.6 s), and an SSP step's 2,560 searches ~58 minutes; dense
    took 12 s for the whole step (benchmarks/RESULTS.md, "Search inside a step"). ``mode="hybrid"`` or
    ``"lexical"`` still choose the others (the search page and API stay hybrid).

    A batch of at least 2 x ``SLICE`` queries (an SSP rollout turn: 256 at the paper's batch) is cut into
    pieces searched at the same time on up to ``workers`` connections of their own (one Postgres backend
    each: a statement runs on one core), each piece embedded while the pieces before it are searched.
    Inside a transaction (tests) it stays on the caller's connection, whose uncommitted rows other
    connections could not see.
    """

    SLICE = 32  # fewest queries per slice: below that a thread and a connection cost more than they save

    def __init__(self, corpus, mode: str = "dense", workers: int | None = None):
        self.corpus = _corpus(corpus)
        self.mode = mode
        self.workers = workers if workers is not None else search_workers()
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        self._pool: ThreadPoolExecutor | None = None
        self._connections: list = []  # each worker thread's connection, closed by close()
        self._lock = threading.Lock()

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        _drop_dead_connection()
        answers: list[list[Passage]] = [[] for _ in queries]
        asked = [i for i, q in enumerate(queries) if q and q.strip()]  # an empty query finds nothing
        if not asked:
            return answers
        hits = self._search([queries[i][:2000] for i in asked], k)
        for i, row in zip(asked, hits):
            answers[i] = [Passage(document_id=str(h.document_id), chunk_id=str(h.chunk_id), title=h.title,
                                  text=h.text, score=h.score) for h in row]
        return answers

    def _search(self, texts: list[str], k: int):
        slices = min(self.workers, len(texts) // self.SLICE)
        if slices < 2 or connection.in_atomic_block:
            return search_many(self.corpus, texts, k, self.mode)
        texts, k, mode = validate(texts, k, self.mode)
        # twice as many pieces as connections: this thread embeds the next piece while Postgres searches
        # the ones before it (the embedding and the SQL each took half of a step at 1M rows)
        pieces = min(len(texts) // self.SLICE, 2 * slices)
        bounds = np.linspace(0, len(texts), pieces + 1).astype(int).tolist()
        embedder = None if mode == "lexical" else embedder_for(self.corpus)

        def part(lo: int, hi: int, vectors):
            _drop_dead_connection()  # the worker thread's own connection, kept from call to call
            own = connections[DEFAULT_DB_ALIAS]
            with self._lock:
                if not any(c is own for c in self._connections):
                    self._connections.append(own)
            return search_many(self.corpus, texts[lo:hi], k, mode, vectors)

        pool = self._executor()
        futures = [pool.submit(part, lo, hi, embedder.encode(texts[lo:hi]) if embedder else None)
                   for lo, hi in zip(bounds[:-1], bounds[1:])]
        return [hits for future in futures for hits in future.result()]

    def _executor(self) -> ThreadPoolExecutor:
        """Worker threads kept for the retriever's life: each keeps its connection (a new Postgres backend
        per piece cost its catalog look-ups and settings again: 2 connections were slower than one)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="search")
        return self._pool

    def close(self) -> None:
        """Stop the worker threads, then close the connections they opened (a run's end; the retriever can
        search again). Closed here rather than by a task per thread: a thread that had just finished its last
        piece could leave its close task to a new, connectionless thread (seen once under load)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            opened, self._connections = self._connections, []
        for wrapper in opened:
            wrapper.inc_thread_sharing()  # its thread has ended: closing it from this one is safe
            try:
                wrapper.close()
            finally:
                wrapper.dec_thread_sharing()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PgDocumentSource:
    """Uniform random documents of a corpus (SPICE's challenger reads one per task).

    A draw picks positions in the corpus's ascending document ids, exactly as ``rng.sample`` over
    the list of ids would (so a seed draws the same documents as before), and turns them into ids
    without holding or reading that list: the ids are kept as runs of consecutive ids (an ingest
    inserts its documents in one go, so a corpus is a few runs), computed in Postgres and read as
    one row per run. A step's draw then costs a look-up of the corpus row's ``doc_count`` and one
    primary-key query for the drawn documents, O(n) rows whatever the corpus size
    (benchmarks/doc_sample.py). An ingest adds documents and bumps ``doc_count`` in the same
    transaction (apps/corpora/ingest.py) and documents are never removed one by one (only with
    their corpus): a grown count reads only the runs above the newest id known (``new_id_reads``);
    a count that still disagrees (documents committed out of id order) or shrank reads every run
    again (``id_reads``). ``invalidate()`` forces that too.
    """

    RUNS_SQL = ("SELECT min(id), count(*) FROM (SELECT id, id - row_number() OVER (ORDER BY id) AS run "
                "FROM {table} WHERE corpus_id = %s AND id > %s) AS ids GROUP BY run ORDER BY 1")

    def __init__(self, corpus):
        self.corpus = _corpus(corpus)
        self._starts = np.zeros(0, dtype=np.int64)  # first id of each run, ascending
        self._ends = np.zeros(0, dtype=np.int64)  # cumulative document count at the end of each run
        self._count: int | None = None  # the corpus's doc_count when the runs were read
        self.id_reads = 0  # full reads of the runs (a metric for tests and benchmarks)
        self.new_id_reads = 0  # reads of the runs above the newest known id, after an ingest

    def invalidate(self) -> None:
        """Read the ids again at the next call (after documents were added outside an ingest)."""
        self._count = None

    @property
    def _total(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def _read_runs(self, after: int) -> tuple[np.ndarray, np.ndarray]:
        with connection.cursor() as cur:
            cur.execute(self.RUNS_SQL.format(table=connection.ops.quote_name(DocumentRow._meta.db_table)),
                        [self.corpus.pk, after])
            rows = cur.fetchall()
        return (np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64))

    def _set_runs(self, starts: np.ndarray, lengths: np.ndarray) -> None:
        self._starts, self._ends = starts, np.cumsum(lengths)

    def _refresh(self) -> int:
        """The corpus's document count, with the runs brought up to date with it."""
        # the count first: ids read after it are at least as new, so a stale cache is never kept
        count = Corpus.objects.filter(pk=self.corpus.pk).values_list("doc_count", flat=True).first()
        if self._count is not None and count == self._count:
            return self._total
        if self._count is not None and count is not None and count > self._total and len(self._starts):
            lengths = np.diff(self._ends, prepend=0)
            last = int(self._starts[-1] + lengths[-1] - 1)
            starts, more = self._read_runs(last)
            self.new_id_reads += 1
            if self._total + int(more.sum()) == count:
                if len(starts) and starts[0] == last + 1:  # the new documents continue the last run
                    lengths[-1] += more[0]
                    starts, more = starts[1:], more[1:]
                self._set_runs(np.concatenate([self._starts, starts]), np.concatenate([lengths, more]))
                self._count = count
                return self._total
        starts, lengths = self._read_runs(-1)
        self._set_runs(starts, lengths)
        self._count = count
        self.id_reads += 1
        return self._total

    def ids_at(self, positions) -> list[int]:
        """The document ids at these positions of the corpus's ascending ids (as known at the last refresh)."""
        pos = np.asarray(positions, dtype=np.int64)
        run = np.searchsorted(self._ends, pos, side="right")
        first = self._ends[run] - np.diff(self._ends, prepend=0)[run]
        return [int(i) for i in self._starts[run] + (pos - first)]

    def __len__(self) -> int:
        _drop_dead_connection()
        return self._refresh()

    def sample(self, n: int, rng=None) -> list[Document]:
        _drop_dead_connection()
        total = self._refresh()
        if not total or n <= 0:
            return []
        rng = rng if rng is not None else random.Random()
        if hasattr(rng, "sample"):  # random.Random: the same draws as rng.sample(ids, n) on a list of the ids
            picks = rng.sample(range(total), n) if n <= total else [rng.randrange(total) for _ in range(n)]
        else:  # numpy Generator
            picks = rng.choice(total, size=n, replace=n > total)
        chosen = self.ids_at(picks)
        rows = {d.id: d for d in DocumentRow.objects.filter(id__in=set(chosen)).only("id", "title", "text")}
        return [Document(id=str(i), title=rows[i].title, text=rows[i].text) for i in chosen]
