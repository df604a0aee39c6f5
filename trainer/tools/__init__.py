"""The search tool: a Retriever protocol (the web side injects pgvector), the standalone BM25
retriever over a JSONL corpus, the tool that formats passages into the tool response the
model sees, and the document sources recipes sample from."""
from trainer.tools.bm25 import InMemoryRetriever
from trainer.tools.corpus import (
    CorpusError,
    Document,
    DocumentSource,
    JsonlDocumentSource,
    corpus_path,
    document_text,
    join_chunks,
    truncate_to_tokens,
)
from trainer.tools.retriever import Passage, Retriever
from trainer.tools.search import SearchTool

__all__ = [
    "CorpusError", "Document", "DocumentSource", "InMemoryRetriever", "JsonlDocumentSource", "Passage",
    "Retriever", "SearchTool", "corpus_path", "document_text", "join_chunks", "truncate_to_tokens",
]
