"""RQ jobs of the `short` queue: ingest an uploaded file, load the bundled Wikipedia corpus.

Each job is a plain function (tests call it directly and through a burst worker). Bad input
ends the job cleanly: the corpus is marked failed with the reason; batches stored before a
failure stay (each batch is its own transaction), and the uploaded file is deleted.
"""
from __future__ import annotations

import logging
from pathlib import Path

from apps.corpora.embedder import EmbedderError
from apps.corpora.ingest import add_errors, ingest_documents
from apps.corpora.models import Corpus
from apps.corpora.parsing import IngestError, parse_file
from apps.corpora.wikipedia import wikipedia_documents

log = logging.getLogger("selfplay.corpora")


def run_ingest(corpus: Corpus, documents: list, errors: list[str] | None = None) -> dict:
    """Ingest parsed documents with progress; marks the corpus ready or failed."""
    corpus.begin_ingest(len(documents))
    add_errors(corpus, errors or [])
    try:
        stats = ingest_documents(corpus, documents)
    except EmbedderError as exc:
        corpus.finish_ingest(str(exc))
        return {"error": str(exc)}
    except Exception as exc:
        corpus.finish_ingest(f"ingestion failed: {type(exc).__name__}: {exc}")
        raise
    corpus.finish_ingest()
    return stats.as_dict()


def ingest_upload(corpus_id: int, stored_path: str, original_name: str) -> dict:
    """Parse a stored upload and ingest it; the stored file is removed afterwards."""
    corpus = Corpus.objects.get(pk=corpus_id)
    path = Path(stored_path)
    try:
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
        result = run_ingest(corpus, parsed.documents, parsed.errors)
        result["errors"] = parsed.errors + result.get("errors", [])
        return result
    finally:
        path.unlink(missing_ok=True)


def load_wikipedia_job(corpus_id: int, offset: int = 0, limit: int | None = None) -> dict:
    corpus = Corpus.objects.get(pk=corpus_id)
    return run_ingest(corpus, wikipedia_documents(offset, limit))
