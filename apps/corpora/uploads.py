"""What the page, the API and the commands share: create a corpus, accept an uploaded file
(check it, store it under MEDIA_ROOT with a generated name, enqueue the ingest job), add one
document synchronously."""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError

from apps.corpora.embedder import EmbedderError, default_name, get_embedder
from apps.corpora.ingest import ingest_documents
from apps.corpora.jobs import queue_ingest
from apps.corpora.models import EMBEDDING_DIM, Corpus, Ingest
from apps.corpora.parsing import IngestError, ParsedDoc, check_file, check_type
from apps.jobs.lifecycle import QueueUnavailable

MAX_TITLE = 500
INGEST_QUEUE = "short"  # short jobs: never behind a training run (settings.RQ_QUEUES)
MAX_TEXT_CHARS = 5_000_000


def upload_dir() -> Path:
    path = Path(settings.MEDIA_ROOT) / "corpora"
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_embedder(name: str) -> int:
    """Load the embedder and check it fits the 384-dimension chunk table; returns its dimension."""
    embedder = get_embedder(name)
    if embedder.dimension != EMBEDDING_DIM:
        raise EmbedderError(
            f"Embedder {name!r} makes {embedder.dimension}-dimension vectors; the chunk table stores "
            f"{EMBEDDING_DIM}-dimension vectors. Use a {EMBEDDING_DIM}-dimension model such as all-MiniLM-L6-v2."
        )
    return embedder.dimension


def create_corpus(name: str, description: str = "", embedder: str | None = None, chunk_tokens: int = 200,
                  chunk_overlap: int = 40) -> Corpus:
    if not isinstance(name, str) or not isinstance(description or "", str) or not isinstance(embedder or "", str):
        raise IngestError("name, description and embedder must be strings; chunk_tokens and chunk_overlap numbers.")
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise IngestError("name: give the corpus a name of 1 to 100 characters.")
    if Corpus.objects.filter(name=name).exists():
        raise IngestError(f"name: a corpus named {name!r} already exists; pick another name.")
    try:
        if isinstance(chunk_tokens, bool) or isinstance(chunk_overlap, bool):
            raise TypeError
        chunk_tokens, chunk_overlap = int(chunk_tokens), int(chunk_overlap)
    except (TypeError, ValueError, OverflowError):
        raise IngestError("chunk_tokens and chunk_overlap must be whole numbers.") from None
    if not 16 <= chunk_tokens <= 254 or not 0 <= chunk_overlap <= chunk_tokens // 2:
        raise IngestError("chunk_tokens must be 16..254 (the embedder reads 256 tokens) and chunk_overlap 0..chunk_tokens/2.")
    embedder = embedder or default_name()
    dimension = check_embedder(embedder)
    try:
        return Corpus.objects.create(name=name, description=description or "", embedder=embedder,
                                     embedding_dim=dimension, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap)
    except IntegrityError:
        raise IngestError(f"name: a corpus named {name!r} already exists; pick another name.") from None


def check_size(size: int) -> None:
    limit = settings.UPLOAD_MAX_BYTES
    if size > limit:
        raise IngestError(f"The file is {size / 2**20:.0f} MiB; the upload limit is {limit // 2**20} MiB "
                          "(SELFPLAY_UPLOAD_MAX_MB). Split it into several files.")


def read_upload(uploaded) -> bytes:
    check_size(uploaded.size)
    check_type(uploaded.name)
    return b"".join(uploaded.chunks())


def accept_file(corpus: Corpus, name: str, data: bytes, enqueue: bool = True) -> dict:
    """Check the file now (bad input -> IngestError), store it, enqueue its ``Ingest`` job on `short`
    (the queue of short jobs: an upload never waits behind a training run on `cpu`). The stored file
    stays until the ingest ends (apps/corpora/jobs.py). ``enqueue=False``: stored and shown as queued
    only (tests run ``ingest_upload`` on it themselves)."""
    check_size(len(data))
    warnings = check_file(data, name)
    stored = upload_dir() / f"{uuid.uuid4().hex}{Path(name).suffix.lower()}"
    stored.write_bytes(data)
    if enqueue:
        ingest = Ingest.objects.create(corpus=corpus, queue=INGEST_QUEUE, source=Ingest.Source.UPLOAD,
                                       path=str(stored), name=Path(name).name[:500])
        try:
            job_id = queue_ingest(corpus, ingest)
        except QueueUnavailable as exc:
            raise IngestError(str(exc)) from None
    else:
        job_id = uuid.uuid4().hex
        corpus.queue_ingest(job_id)
    return {"job_id": job_id, "stored": str(stored), "progress": corpus.progress(), "warnings": warnings}


def add_document(corpus: Corpus, title: str, text: str, source: str = "api") -> dict:
    """One document, ingested now (small: no job). Returns the ingest stats."""
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        raise IngestError(f"title: give a title of 1 to {MAX_TITLE} characters.")
    if not isinstance(text, str) or not text.strip():
        raise IngestError("text: the document text is empty; send some text.")
    if len(text) > MAX_TEXT_CHARS:
        raise IngestError(f"text: {len(text):,} characters is too long for a JSON document (limit {MAX_TEXT_CHARS:,}); upload it as a file.")
    stats = ingest_documents(corpus, [ParsedDoc(title.strip(), text.strip(), source)])
    corpus.refresh_from_db()
    if corpus.status == Corpus.Status.EMPTY:
        Corpus.objects.filter(pk=corpus.pk, status=Corpus.Status.EMPTY).update(status=Corpus.Status.READY)
        corpus.refresh_from_db()
    return stats.as_dict()
