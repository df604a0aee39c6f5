"""Small pure helpers the SCOPE, SCORE and pi-Play recipes share.

- ``stratified_counts`` / ``stratified_draw``: split N prompts over categories in a fixed
  ratio (SCOPE's 4:3:2 search turns, pi-Play's 4:3:2:1 hops) by largest remainder, then
  shuffle, so every batch holds the ratio as closely as its size allows.
- ``tag_content``: the last non-empty ``<tag>`` body; ``assistant_texts``: a trajectory's model turns.

The format-reward pieces (think fraction, valid searches) are ``trainer.rewards``'s.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence

from trainer.verify import extract_tag


def stratified_counts(n: int, weights: Sequence[float]) -> list[int]:
    """How many of ``n`` items fall in each category, proportional to ``weights``.

    Largest-remainder rounding: counts sum to n; ties go to the earlier category.
    n=9, [4,3,2] -> [4,3,2];  n=4, [4,3,2] -> 4*4/9=1.78, 1.33, 0.89 -> [2,1,1].
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    total = float(sum(weights))
    if not weights or total <= 0 or any(w < 0 for w in weights):
        raise ValueError(f"weights must be non-negative with a positive sum, got {list(weights)}")
    exact = [n * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def stratified_draw(n: int, weights: Sequence[float], rng: random.Random, start: int = 1) -> list[int]:
    """``n`` category values (``start``, ``start+1`` ...) in the ``weights`` ratio, shuffled."""
    values = [start + i for i, c in enumerate(stratified_counts(n, weights)) for _ in range(c)]
    rng.shuffle(values)
    return values


def tag_content(text: str, tag: str) -> str | None:
    """The last complete ``<tag>...</tag>`` body (``trainer.verify.extract_tag``), None when empty."""
    return extract_tag(text, tag) or None


def assistant_texts(turns: Sequence[dict]) -> list[str]:
    """The assistant turns of a trajectory's ``turns`` list."""
    return [t.get("text", "") for t in turns if t.get("role") == "assistant"]

