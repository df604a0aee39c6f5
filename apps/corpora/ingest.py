"""The ingest pipeline: documents -> dedup -> chunks -> embeddings -> COPY into Postgres.

Work goes in batches of documents. Chunking and embedding happen outside any transaction;
then one transaction per batch locks the corpus row, inserts the batch's documents, COPYs
their chunks (binary COPY through psycopg3, vectors included) and bumps the corpus's
counters. A failure rolls the whole batch back, so no document is ever half-inserted.
Duplicates (same content hash in the corpus, or twice in the upload) are skipped and counted.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np
from django.db import connection, transaction
from django.db.models import F

from apps.corpora.chunking import chunk_text
from apps.corpora.embedder import Embedder, embedder_for
from apps.corpora.models import Corpus, Document
from apps.corpora.parsing import ParsedDoc

log = logging.getLogger("selfplay.corpora")
BATCH_DOCS = 64
COPY_SQL = ("COPY corpora_chunk (document_id, corpus_id, ordinal, text, token_start, token_end, embedding) "
            "FROM STDIN (FORMAT BINARY)")


@dataclass
class Stats:
    documents: int = 0
    chunks: int = 0
    duplicates: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"documents": self.documents, "chunks": self.chunks, "skipped_duplicates": self.duplicates,
                "errors": self.errors}


def content_hash(text: str) -> str:
    """sha256 of the text with whitespace collapsed, so re-wrapped copies count as duplicates."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()


def _batches(docs: Iterable[ParsedDoc], size: int) -> Iterator[list[ParsedDoc]]:
    batch = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _existing_hashes(corpus: Corpus, hashes: list[str]) -> set[str]:
    return set(Document.objects.filter(corpus=corpus, content_hash__in=hashes).values_list("content_hash", flat=True))


@dataclass
class _Prepared:
    doc: ParsedDoc
    hash: str
    spans: list
    start: int  # index of its first chunk in the batch's vectors


def _prepare(corpus: Corpus, embedder: Embedder, batch: list[ParsedDoc], stats: Stats) -> tuple[list[_Prepared], np.ndarray, int]:
    """Dedup, chunk and embed one batch; returns prepared docs, their vectors [C, dim], duplicates."""
    for doc in batch:  # Postgres text cannot hold NUL characters
        doc.text, doc.title = doc.text.replace("\x00", ""), doc.title.replace("\x00", "")
    hashes = [content_hash(d.text) for d in batch]
    seen = _existing_hashes(corpus, hashes)
    prepared, inputs, duplicates = [], [], 0
    for doc, digest in zip(batch, hashes):
        if digest in seen:
            duplicates += 1
            continue
        seen.add(digest)
        spans = chunk_text(embedder.tokenizer, doc.text, corpus.chunk_tokens, corpus.chunk_overlap)
        if not spans:
            stats.errors.append(f"{doc.source}: no text left after cleaning, skipped")
            continue
        prepared.append(_Prepared(doc, digest, spans, len(inputs)))
        inputs += [f"{doc.title}\n{s.text}" for s in spans]  # the title gives each chunk its context
    return prepared, embedder.encode(inputs), duplicates


def _copy_chunks(corpus_id: int, rows: list[tuple]) -> None:
    from pgvector.psycopg import register_vector

    raw = connection.connection  # the psycopg3 connection under Django's
    if not getattr(raw, "_selfplay_vector", False):
        register_vector(raw)
        raw._selfplay_vector = True
    with connection.cursor() as cursor, cursor.cursor.copy(COPY_SQL) as copy:
        copy.set_types(["int8", "int8", "int4", "text", "int4", "int4", "vector"])
        for row in rows:
            copy.write_row(row)


def _store(corpus: Corpus, prepared: list[_Prepared], vectors: np.ndarray, processed: int,
           duplicates: int) -> tuple[int, int, int]:
    """One transaction: documents, their chunks, the corpus counters -> (chunks, documents, duplicates)."""
    with transaction.atomic():
        Corpus.objects.select_for_update().filter(pk=corpus.pk).values_list("pk", flat=True).get()
        taken = _existing_hashes(corpus, [p.hash for p in prepared])  # raced by another ingest
        duplicates += sum(1 for p in prepared if p.hash in taken)
        prepared = [p for p in prepared if p.hash not in taken]
        docs = Document.objects.bulk_create([
            Document(corpus=corpus, title=p.doc.title[:500], source=p.doc.source[:500], content_hash=p.hash,
                     metadata=p.doc.metadata, text=p.doc.text)
            for p in prepared
        ])
        rows = []
        for p, doc in zip(prepared, docs):
            for ordinal, span in enumerate(p.spans):
                rows.append((doc.pk, corpus.pk, ordinal, span.text, span.token_start, span.token_end,
                             vectors[p.start + ordinal]))
        _copy_chunks(corpus.pk, rows)
        Corpus.objects.filter(pk=corpus.pk).update(
            doc_count=F("doc_count") + len(docs), chunk_count=F("chunk_count") + len(rows),
            progress_done=F("progress_done") + processed, skipped_duplicates=F("skipped_duplicates") + duplicates,
        )
    return len(rows), len(docs), duplicates


def ingest_documents(corpus: Corpus, docs: Iterable[ParsedDoc], *, batch_docs: int = BATCH_DOCS,
                     on_batch: Callable[[Stats], None] | None = None) -> Stats:
    """Ingest documents into a corpus, batch by batch; progress lands on the corpus row."""
    embedder = embedder_for(corpus)
    stats = Stats()
    for batch in _batches(docs, batch_docs):
        errors_before = len(stats.errors)
        prepared, vectors, duplicates = _prepare(corpus, embedder, batch, stats)
        chunks, stored, duplicates = _store(corpus, prepared, vectors, len(batch), duplicates)
        stats.documents += stored
        stats.chunks += chunks
        stats.duplicates += duplicates
        if len(stats.errors) > errors_before:
            add_errors(corpus, stats.errors[errors_before:])
        if on_batch:
            on_batch(stats)
    return stats


MAX_STORED_ERRORS = 200


def add_errors(corpus: Corpus, messages: list[str]) -> None:
    """Append messages to the corpus's error list (kept to the newest MAX_STORED_ERRORS)."""
    if not messages:
        return
    with transaction.atomic():
        row = Corpus.objects.select_for_update().only("errors").get(pk=corpus.pk)
        row.errors = (list(row.errors) + list(messages))[-MAX_STORED_ERRORS:]
        Corpus.objects.filter(pk=corpus.pk).update(errors=row.errors)
    corpus.errors = row.errors
