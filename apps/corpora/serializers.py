"""JSON shapes of the corpora API."""
from __future__ import annotations

from apps.corpora.models import Corpus


def corpus_json(corpus: Corpus) -> dict:
    return {
        "id": corpus.pk,
        "name": corpus.name,
        "description": corpus.description,
        "embedder": corpus.embedder,
        "embedding_dim": corpus.embedding_dim,
        "chunk_tokens": corpus.chunk_tokens,
        "chunk_overlap": corpus.chunk_overlap,
        "status": corpus.status,
        "doc_count": corpus.doc_count,
        "chunk_count": corpus.chunk_count,
        "progress": corpus.progress(),
        "created_at": corpus.created_at.isoformat(),
    }
