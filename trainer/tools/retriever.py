from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable


@dataclass
class Passage:
    document_id: str
    chunk_id: str
    title: str
    text: str
    score: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Top-k passages for each query, in one batch (a rollout sends all its pending queries)."""
        ...
