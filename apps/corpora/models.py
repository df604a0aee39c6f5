"""Corpus, Document, Chunk: what a self-play run searches.

A Chunk carries a 384-dimension embedding (pgvector `vector`, full precision) and a generated
`tsv` column (Postgres full-text, GIN index). The HNSW cosine index is an expression index on
`embedding::halfvec(384)` (16-bit floats: half the index, recall unchanged on real embeddings;
benchmarks/RESULTS.md, issue #3); apps/corpora/search.py orders by the same expression so the
planner uses it, and scores the hits with the full-precision vectors. The vector column has one fixed dimension,
so a Corpus records its embedder's name and dimension and every ingest or search checks
that the embedder in use produces vectors of that size (see embedder.check_dimension).
Supporting another dimension means another Chunk table (or column) with its own index.
"""
from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from pgvector.django import HalfVectorField, HnswIndex, VectorField

from apps.jobs.waiting import wait_reason

EMBEDDING_DIM = 384
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
HALFVEC_INDEX = "corpora_chunk_halfvec_hnsw"


class AsHalfvec(models.Func):
    """`(embedding)::halfvec(n)`: the expression the HNSW index is built on (and search.py orders by)."""

    template = "(%(expressions)s)::halfvec(%(dimensions)s)"
    output_field = HalfVectorField()


class Corpus(models.Model):
    class Status(models.TextChoices):
        EMPTY = "empty"
        QUEUED = "queued"
        INGESTING = "ingesting"
        READY = "ready"
        FAILED = "failed"

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    embedder = models.CharField(max_length=500, default=DEFAULT_EMBEDDER,
                                help_text="Bundled name or a local sentence-transformers model folder.")
    embedding_dim = models.PositiveIntegerField(default=EMBEDDING_DIM)
    chunk_tokens = models.PositiveIntegerField(default=200)
    chunk_overlap = models.PositiveIntegerField(default=40)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.EMPTY)
    doc_count = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    # progress of the current (or last) ingestion
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    skipped_duplicates = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True, help_text="Messages of the last ingestion, newest last.")
    job_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "corpora"

    def __str__(self) -> str:
        return self.name

    @property
    def percent(self) -> int:
        if not self.progress_total:
            return 100 if self.status == self.Status.READY else 0
        return min(100, round(100 * self.progress_done / self.progress_total))

    def progress(self) -> dict:
        return {
            "status": self.status,
            "documents_done": self.progress_done,
            "documents_total": self.progress_total,
            "skipped_duplicates": self.skipped_duplicates,
            "errors": self.errors,
            "percent": self.percent,
            "job_id": self.job_id,
            # what a queued ingestion waits for ("2nd in line on short, behind ...")
            "waiting_for": (wait_reason(self.job_id) or None) if self.status == self.Status.QUEUED else None,
        }

    def queue_ingest(self, job_id: str = "") -> None:
        """An ingestion was enqueued: reset the progress shown on the page and by the API."""
        self.status, self.job_id = self.Status.QUEUED, job_id
        self.progress_done = self.progress_total = self.skipped_duplicates = 0
        self.errors = []
        self.save(update_fields=["status", "job_id", "progress_done", "progress_total", "skipped_duplicates",
                                 "errors", "updated_at"])

    def begin_ingest(self, total: int) -> None:
        Corpus.objects.filter(pk=self.pk).update(status=self.Status.INGESTING, progress_total=total, progress_done=0,
                                                 skipped_duplicates=0)
        self.refresh_from_db()

    def finish_ingest(self, error: str | None = None) -> None:
        """READY, or FAILED with the reason appended to the errors."""
        self.refresh_from_db()
        if error:
            self.errors = (list(self.errors) + [error])[-200:]
        self.status = self.Status.FAILED if error else self.Status.READY
        self.save(update_fields=["status", "errors", "updated_at"])

    def refresh_counts(self) -> None:
        self.doc_count = self.documents.count()
        self.chunk_count = Chunk.objects.filter(corpus=self).count()
        self.save(update_fields=["doc_count", "chunk_count", "updated_at"])


class Document(models.Model):
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="documents")
    title = models.CharField(max_length=500)
    source = models.CharField(max_length=500, blank=True, help_text="File name (and member / line) it came from.")
    content_hash = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["corpus", "content_hash"], name="corpora_document_unique_hash")]

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="+")
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    token_start = models.PositiveIntegerField()
    token_end = models.PositiveIntegerField()
    embedding = VectorField(dimensions=EMBEDDING_DIM)
    tsv = models.GeneratedField(
        expression=SearchVector("text", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["document_id", "ordinal"]
        indexes = [
            HnswIndex(OpClass(AsHalfvec("embedding", dimensions=EMBEDDING_DIM), name="halfvec_cosine_ops"),
                      name=HALFVEC_INDEX, m=16, ef_construction=64),
            GinIndex(name="corpora_chunk_tsv_gin", fields=["tsv"]),
            models.Index(fields=["corpus", "document"], name="corpora_chunk_corpus_doc"),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ordinal}"
