"""``InMemoryRetriever``: BM25 lexical search over a JSONL corpus, in numpy, no service.

Documents are split into ~100-word passages (``chunk_text``), each passage is indexed with
its title. Scoring is Okapi BM25 (k1 = 0.9, b = 0.4, the Anserini defaults) with the
Lucene idf ``log(1 + (N - df + 0.5) / (df + 0.5))``; per-posting weights are precomputed
so a query costs one scatter-add per query term. ``search`` takes the whole batch of
queries a rollout step produced.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from trainer.tools.corpus import Document, chunk_text, corpus_path, draw_indices, read_jsonl_corpus
from trainer.tools.retriever import Passage

_TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be but by for from had has have he her his i if in into is it its of on or "
    "she so such that the their them then there these they this to was were what when where which "
    "who whom why will with would you your".split()
)


def terms(text: str) -> list[str]:
    """Lower-cased alphanumeric words minus English stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class InMemoryRetriever:
    """BM25 over passages of a document list. Implements the ``Retriever`` protocol."""

    def __init__(self, documents: list[Document], chunk_words: int = 100, k1: float = 0.9, b: float = 0.4):
        self.k1, self.b = k1, b
        self.documents = [(d.id, d.title, d.text) for d in documents]
        self._docs = documents
        self.passages: list[Passage] = []
        for doc in documents:
            for i, chunk in enumerate(chunk_text(doc.text, chunk_words)):
                self.passages.append(Passage(document_id=doc.id, chunk_id=f"{doc.id}:{i}", title=doc.title, text=chunk))
        self._build()

    @classmethod
    def from_jsonl(cls, path: str | Path, chunk_words: int = 100) -> "InMemoryRetriever":
        """From a JSONL corpus file, or ``bundled:wikipedia``."""
        return cls(read_jsonl_corpus(corpus_path(path)), chunk_words=chunk_words)

    def sample(self, n: int, rng=None) -> list[Document]:
        """``DocumentSource``: n documents drawn uniformly (the standalone runner hands the
        retriever to recipes as their document source)."""
        return [self._docs[i] for i in draw_indices(n, len(self._docs), rng)] if self._docs else []

    def _build(self) -> None:
        vocab: dict[str, int] = {}
        rows, cols, counts = [], [], []
        lengths = np.zeros(len(self.passages), dtype=np.float64)
        for pid, passage in enumerate(self.passages):
            tf: dict[int, int] = {}
            words = terms(f"{passage.title} {passage.text}")
            lengths[pid] = len(words)
            for w in words:
                tid = vocab.setdefault(w, len(vocab))
                tf[tid] = tf.get(tid, 0) + 1
            rows.extend(tf.keys())
            cols.extend([pid] * len(tf))
            counts.extend(tf.values())
        term_ids = np.asarray(rows, dtype=np.int64)
        passage_ids = np.asarray(cols, dtype=np.int64)
        tf_arr = np.asarray(counts, dtype=np.float64)
        n = max(len(self.passages), 1)
        avg_len = max(lengths.mean() if len(lengths) else 1.0, 1e-9)
        df = np.bincount(term_ids, minlength=len(vocab)).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = self.k1 * (1 - self.b + self.b * lengths[passage_ids] / avg_len)
        weights = idf[term_ids] * tf_arr * (self.k1 + 1) / (tf_arr + norm)
        order = np.argsort(term_ids, kind="stable")  # postings grouped by term
        self._post_passages = passage_ids[order]
        self._post_weights = weights[order]
        self._offsets = np.concatenate([[0], np.cumsum(np.bincount(term_ids, minlength=len(vocab)))])
        self._vocab = vocab

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` ([n_passages])."""
        out = np.zeros(len(self.passages), dtype=np.float64)
        for w in set(terms(query)):
            tid = self._vocab.get(w)
            if tid is None:
                continue
            lo, hi = self._offsets[tid], self._offsets[tid + 1]
            np.add.at(out, self._post_passages[lo:hi], self._post_weights[lo:hi])
        return out

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per query (score > 0 only; an empty query finds nothing)."""
        results: list[list[Passage]] = []
        for query in queries:
            scores = self.scores(query or "")
            hits = np.flatnonzero(scores > 0)
            if len(hits) > k:
                hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
            hits = hits[np.lexsort((hits, -scores[hits]))]  # best first, ties by index
            results.append([self._passage(int(i), float(scores[i])) for i in hits])
        return results

    def _passage(self, pid: int, score: float) -> Passage:
        p = self.passages[pid]
        return Passage(document_id=p.document_id, chunk_id=p.chunk_id, title=p.title, text=p.text, score=score)

    def document_chunks(self, doc_id: str) -> list[str]:
        """The passages of one document, in order."""
        return [p.text for p in self.passages if p.document_id == doc_id]
