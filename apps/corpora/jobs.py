"""RQ jobs of the `short` queue: ingest an uploaded file, load the bundled Wikipedia corpus.

``execute_ingest(ingest_id)`` runs one ``Ingest`` row through the shared job layer (``run_job`` of
apps/jobs/lifecycle.py, as runs and evaluations): the atomic claim, a heartbeat thread while it
ingests, failures recorded on the row. A worker that dies mid-ingest stops beating; the reaper fails
the ingest (resumable) and the corpus says where it stopped and how to resume (``resume_ingest``).

Bad input ends the job cleanly: the corpus is marked failed with the reason and the upload is
removed. Batches stored before any failure stay (each batch is its own transaction, which also counts
its documents in the corpus's progress), so a resumed ingest goes on after the documents the progress
counted (``Ingest.resume_from``), with the progress continuing from there; content hashes still keep
anything from being stored twice. The upload is removed when the ingest
ends (finished, or failed for good), and kept while it can be resumed.

``ingest_upload`` / ``load_wikipedia_job`` are the plain bodies (tests call them directly).
"""
from __future__ import annotations

import logging
from pathlib import Path

from apps.corpora.embedder import EmbedderError
from apps.corpora.ingest import add_errors, ingest_documents
from apps.corpora.models import Corpus, Ingest
from apps.jobs.lifecycle import JobKind, QueueUnavailable, enqueue, run_job
from apps.corpora.parsing import IngestError, parse_file
from apps.corpora.wikipedia import wikipedia_documents

log = logging.getLogger("selfplay.corpora")


def run_ingest(corpus: Corpus, documents: list, errors: list[str] | None = None, start: int = 0) -> dict:
    """Ingest parsed documents with progress; marks the corpus ready or failed. ``start``: the first
    ``start`` documents were stored by an earlier attempt of this ingest (a resume): the progress counts them
    as done and the job goes on after them (from 0 when the source is shorter than that now)."""
    start = start if 0 < start <= len(documents) else 0
    corpus.begin_ingest(len(documents), done=start)
    add_errors(corpus, errors or [])
    try:
        stats = ingest_documents(corpus, documents[start:])
    except EmbedderError as exc:
        corpus.finish_ingest(str(exc))
        return {"error": str(exc)}
    except Exception as exc:
        corpus.finish_ingest(f"ingestion failed: {type(exc).__name__}: {exc}")
        raise
    corpus.finish_ingest()
    return stats.as_dict()


def ingest_file(corpus: Corpus, path: Path, original_name: str, start: int = 0) -> dict:
    """Parse a stored upload and ingest it (the file stays); ``{"error": ...}`` when it cannot be read."""
    try:
        parsed = parse_file(path.read_bytes(), original_name)
    except (IngestError, OSError) as exc:
        corpus.begin_ingest(0)
        corpus.finish_ingest(str(exc))
        return {"error": str(exc)}
    except Exception as exc:  # a parser bug must not leave the corpus queued forever
        log.exception("parsing %s failed", original_name)
        message = f"{original_name}: could not be read ({type(exc).__name__}: {exc}); check the file or report it."
        corpus.begin_ingest(0)
        corpus.finish_ingest(message)
        return {"error": message}
    result = run_ingest(corpus, parsed.documents, parsed.errors, start)
    result["errors"] = parsed.errors + result.get("errors", [])
    return result


def ingest_upload(corpus_id: int, stored_path: str, original_name: str) -> dict:
    """Parse a stored upload and ingest it; the stored file is removed afterwards."""
    path = Path(stored_path)
    try:
        return ingest_file(Corpus.objects.get(pk=corpus_id), path, original_name)
    finally:
        path.unlink(missing_ok=True)


def load_wikipedia_job(corpus_id: int, offset: int = 0, limit: int | None = None) -> dict:
    corpus = Corpus.objects.get(pk=corpus_id)
    return run_ingest(corpus, wikipedia_documents(offset, limit))


# ---- Ingest rows: queued, claimed, beating, reaped and resumed like runs ----------------------------

def _ingest(ingest: Ingest) -> dict:
    corpus = Corpus.objects.get(pk=ingest.corpus_id)
    if ingest.source == Ingest.Source.WIKIPEDIA:
        return run_ingest(corpus, wikipedia_documents(ingest.offset, ingest.limit), start=ingest.resume_from)
    return ingest_file(corpus, Path(ingest.path), ingest.name, ingest.resume_from)


def _succeed(ingest: Ingest, result: dict) -> str:
    ingest.finish(result.get("error") or "")
    if ingest.status == Ingest.Status.FAILED:
        return f"ingest {ingest.pk} failed: {ingest.error}"
    return f"ingest {ingest.pk} finished: {result.get('documents', 0)} documents, {result.get('chunks', 0)} chunks"


INGEST_JOB = JobKind("ingest", Ingest, claim=Ingest.claim, fail=Ingest.fail, succeed=_succeed)


def execute_ingest(ingest_id: int) -> str:
    """The RQ job of one Ingest row."""
    return run_job(INGEST_JOB, ingest_id, _ingest)


def queue_ingest(corpus: Corpus, ingest: Ingest, resumed: bool = False) -> str:
    """Show the corpus as queued, then put ``ingest`` on its queue (the reaper is kept scheduled); the
    corpus's progress is reset before the job can start (kept when ``resumed``), so a fast worker's progress
    is never overwritten. QueueUnavailable (with what to do) when Redis refuses; the ingest and the corpus are
    failed then."""
    corpus.queue_ingest("", resumed=resumed)
    job_id = enqueue(ingest, execute_ingest, "ingest", Ingest.fail, "resume the ingest", timeout=24 * 3600)
    Corpus.objects.filter(pk=corpus.pk).update(job_id=job_id)
    corpus.job_id = job_id
    return job_id


def resume_ingest(corpus: Corpus) -> Ingest:
    """Queue the corpus's last ingest again when it may be resumed; IngestError says why not otherwise."""
    last = corpus.ingests.first()
    if last is None:
        raise IngestError(f"corpus {corpus.name!r} has had no background ingest; upload a file to fill it.")
    why_not = last.can_resume()
    if why_not:
        raise IngestError(why_not)
    if not Ingest.objects.filter(pk=last.pk, status=Ingest.Status.FAILED, resumable=True).update(
            status=Ingest.Status.QUEUED, resumable=False, error="", finished_at=None, heartbeat_at=None):
        raise IngestError(f"ingest {last.pk} changed meanwhile; reload the page.")
    last.refresh_from_db()
    try:
        queue_ingest(corpus, last, resumed=True)
    except QueueUnavailable as exc:
        raise IngestError(str(exc)) from None
    return last
