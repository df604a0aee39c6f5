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

from pathlib import Path

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.utils import timezone
from pgvector.django import HalfVectorField, HnswIndex, VectorField

from apps.jobs.models import JobRow
from apps.jobs.reaper import reap
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

    def queue_ingest(self, job_id: str = "", resumed: bool = False) -> None:
        """An ingestion was enqueued: reset the progress shown on the page and by the API. ``resumed``: the
        progress it had reached stays (a resumed ingest goes on from there), only the messages are cleared."""
        self.status, self.job_id = self.Status.QUEUED, job_id
        if not resumed:
            self.progress_done = self.progress_total = self.skipped_duplicates = 0
        self.errors = []
        self.save(update_fields=["status", "job_id", "progress_done", "progress_total", "skipped_duplicates",
                                 "errors", "updated_at"])

    def begin_ingest(self, total: int, done: int = 0) -> None:
        """The job starts on ``total`` documents; ``done`` of them were stored by an earlier attempt of the same
        ingest (a resume), so the progress goes on from there and keeps that attempt's duplicate count."""
        fresh = {} if done else {"skipped_duplicates": 0}
        Corpus.objects.filter(pk=self.pk).update(status=self.Status.INGESTING, progress_total=total,
                                                 progress_done=done, **fresh)
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


class Ingest(JobRow):
    """One ingestion job of a corpus, claimed, beating and reaped like a run (apps/jobs): an uploaded file
    (kept under ``MEDIA_ROOT/corpora/`` until the ingest ends) or the bundled Wikipedia summaries.

    Ends: ``finished``; ``failed`` with ``resumable`` off (the file cannot be read, the embedder does not
    fit: running it again would fail the same way; the upload is removed); or ``failed`` with ``resumable``
    on (its worker died and the reaper failed it, or the job raised: the upload is kept). ``resume_ingest``
    (apps/corpora/jobs.py) queues a resumable one again: it goes on after the documents its earlier attempts
    stored (``resume_from``, the corpus's progress when it stopped), so the progress counts the whole source
    (4000 / 9033 continuing, not a restart at 0); content hashes still keep any document from being stored twice."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    class Source(models.TextChoices):
        UPLOAD = "upload"
        WIKIPEDIA = "wikipedia"

    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="ingests")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    queue = models.CharField(max_length=32, default="short")
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.UPLOAD)
    path = models.CharField(max_length=1000, blank=True, help_text="The stored upload (removed when the ingest ends).")
    name = models.CharField(max_length=500, blank=True, help_text="The uploaded file's own name.")
    offset = models.PositiveIntegerField(default=0, help_text="Wikipedia: articles skipped first.")
    limit = models.PositiveIntegerField(null=True, blank=True, help_text="Wikipedia: at most this many articles.")
    resumable = models.BooleanField(default=False)
    resume_from = models.PositiveIntegerField(
        default=0, help_text="Documents of the source an earlier attempt of this ingest stored (in order); a resume "
                             "goes on after them.")
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"ingest {self.pk} of corpus {self.corpus_id} ({self.status})"

    @property
    def what(self) -> str:
        return self.name if self.source == self.Source.UPLOAD else "the Wikipedia summaries"

    def claim(self, worker: str) -> bool:
        """queued -> running; False when another worker has it, or it ended meanwhile."""
        now = timezone.now()
        won = Ingest.objects.filter(pk=self.pk, status=self.Status.QUEUED).update(
            status=self.Status.RUNNING, started_at=now, heartbeat_at=now, worker_name=worker[:200], error="")
        if won:
            self.refresh_from_db()
        return won == 1

    def finish(self, error: str = "") -> None:
        """The end of the job it ran: finished, or failed for good (``error``). The upload is removed."""
        status = self.Status.FAILED if error else self.Status.FINISHED
        Ingest.objects.filter(pk=self.pk, status__in=[self.Status.QUEUED, self.Status.RUNNING]).update(
            status=status, error=error[:5000], finished_at=timezone.now(), resumable=False)
        self.refresh_from_db()
        self.remove_upload()

    def fail(self, error: str) -> None:
        """The job raised (the database went away, a bug): failed and resumable; the upload is kept."""
        if Ingest.objects.filter(pk=self.pk, status__in=[self.Status.QUEUED, self.Status.RUNNING]).update(
                status=self.Status.FAILED, error=error[:5000], finished_at=timezone.now(), resumable=True):
            self._tell_corpus(error)
        self.refresh_from_db()

    @classmethod
    def reap_stale(cls, now=None) -> list[int]:
        """Fail running ingests whose worker stopped beating (killed, machine gone): resumable."""
        return reap(cls, cls._fail_silent, "resume the ingest: documents already stored are skipped", now)

    @classmethod
    def any_active(cls) -> bool:
        return cls.objects.filter(status__in=(cls.Status.QUEUED, cls.Status.RUNNING)).exists()

    def _fail_silent(self, error: str) -> bool:
        """Failed by the reaper, unless it beat or ended since the reaper read it."""
        failed = Ingest.objects.filter(pk=self.pk, status=self.Status.RUNNING, heartbeat_at=self.heartbeat_at).update(
            status=self.Status.FAILED, finished_at=timezone.now(), error=error[:5000], resumable=True) == 1
        if failed:
            self._tell_corpus(error)
        return failed

    def _tell_corpus(self, error: str) -> None:
        """The corpus says where the ingest stopped; the ingest keeps it (``resume_from``) for its resume: every
        batch stores its documents and counts them in the progress in one transaction, in the source's order,
        so the documents the progress counted are the part of the source that is stored."""
        corpus = Corpus.objects.get(pk=self.corpus_id)
        reached = corpus.progress_done if corpus.progress_total else 0
        Ingest.objects.filter(pk=self.pk).update(resume_from=reached)
        corpus.finish_ingest(f"ingest of {self.what} stopped at {corpus.progress_done} of {corpus.progress_total} "
                             f"documents: {error}. Resume it (the Resume button, or POST "
                             f"/api/v1/corpora/{corpus.pk}/resume/): it continues from what is stored.")

    def can_resume(self) -> str:
        """"" when ``resume()`` may run, else why not (a sentence that says what to do instead)."""
        if self.status != self.Status.FAILED or not self.resumable:
            return f"ingest {self.pk} is {self.status}{'' if self.status != self.Status.FAILED else ' for good'}; nothing to resume"
        if self.source == self.Source.UPLOAD and not (self.path and Path(self.path).is_file()):
            return (f"the stored upload of {self.name} is gone; upload the file again (documents already stored are "
                    "skipped)")
        return ""

    def remove_upload(self) -> None:
        if self.source == self.Source.UPLOAD and self.path:
            Path(self.path).unlink(missing_ok=True)


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
