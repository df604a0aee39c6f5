"""Small pure helpers the SCOPE, SCORE and pi-Play recipes share.

- ``stratified_counts`` / ``stratified_draw``: split N prompts over categories in a fixed
  ratio (SCOPE's 4:3:2 search turns, pi-Play's 4:3:2:1 hops) by largest remainder, then
  shuffle, so every batch holds the ratio as closely as its size allows.
- ``tag_content`` / ``tag_contents``: the text inside an XML-ish tag (non-greedy, last or all).
- ``think_fraction`` / ``valid_searches``: the pieces of the papers' format rewards.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence

_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


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


def tag_contents(text: str, tag: str) -> list[str]:
    """Every ``<tag>...</tag>`` body (stripped), in order; attributes on the open tag allowed."""
    pattern = re.compile(rf"<{tag}(?:\s[^>]*)?>(.*?)</{tag}>", re.DOTALL)
    return [m.strip() for m in pattern.findall(text or "")]


def tag_content(text: str, tag: str) -> str | None:
    """The last ``<tag>...</tag>`` body, or None when the tag is absent or empty."""
    found = tag_contents(text, tag)
    return found[-1] if found and found[-1] else None


def assistant_texts(turns: Sequence[dict]) -> list[str]:
    """The assistant turns of a trajectory's ``turns`` list."""
    return [t.get("text", "") for t in turns if t.get("role") == "assistant"]


def think_fraction(texts: Sequence[str]) -> float:
    """Fraction of assistant turns holding a ``<think>...</think>`` block (0 with no turns)."""
    if not texts:
        return 0.0
    return sum(1 for t in texts if _THINK.search(t)) / len(texts)


def valid_searches(text: str) -> int:
    """Well-formed ``<search>`` calls with a non-empty query in one text."""
    return sum(1 for q in _SEARCH.findall(text or "") if q.strip())


def has_valid_search(text: str) -> bool:
    return valid_searches(text) > 0
