"""Near-duplicate texts: the one detector behind the run page's task ledger (apps/runs/ledger.py)
and review's suspicious tasks (apps/review/suspicious.py).

Two texts are near duplicates when the Jaccard similarity of their character ``SHINGLE``-gram sets
(lower-cased, punctuation dropped, whitespace runs collapsed) reaches a threshold. A lexical
measure (no embeddings: the corpus embedder costs seconds per page on a CPU). MinHash signatures
(``MINHASH_K`` hashes, standard error <= 0.044) estimate every pair; a pair whose estimate is within
``EXACT_BAND`` of the threshold is decided by the exact Jaccard of its shingle sets.

- ``near_duplicate_flags(texts, threshold, window)``: for each text (oldest first), is it a near
  duplicate of one of the ``window`` texts before it (the ledger's rate);
- ``most_similar_earlier(texts, threshold, start)``: for each text from ``start`` on, the earlier
  text most similar to it and their exact similarity, when it reaches the threshold (review).

A well-kept library was measured for this (datasketch 2.0's MinHash and MinHashLSH): on 400
questions of 500 characters it took 1.0 s where these numpy signatures take 0.2 s (2-core machine
under load), so the signatures stay here.
"""
from __future__ import annotations

import re

import numpy as np

SHINGLE = 5
MINHASH_K = 128
EXACT_BAND = 0.1  # ~2.3 standard errors of a 128-hash estimate (sqrt(0.25 / 128) = 0.044)
MOST_SIMILAR_CHECKED = 16  # candidates (highest estimates first) whose exact similarity is computed


def normalize(text: str) -> str:
    """Lower-cased, punctuation as spaces, whitespace runs collapsed.

    >>> normalize("  Question 1-0: what  YEAR? ")
    'question 1 0 what year'
    """
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", (text or "").lower())).strip()


def shingles(text: str, k: int = SHINGLE) -> frozenset[str]:
    """The set of character k-grams of the normalized text (the whole text when it is shorter).

    >>> sorted(shingles("Ab  ab", 3))
    [' ab', 'ab ', 'b a']
    """
    norm = normalize(text)
    if len(norm) <= k:
        return frozenset([norm]) if norm else frozenset()
    return frozenset(norm[i:i + k] for i in range(len(norm) - k + 1))


def shingle_hashes(text: str, k: int = SHINGLE) -> np.ndarray:
    """[S] the distinct 64-bit polynomial hashes of the same k-grams as ``shingles`` (deterministic).

    >>> len(shingle_hashes("Ab  ab", 3)), len(shingle_hashes("")), len(shingle_hashes("ab", 3))
    (3, 0, 1)
    """
    norm = normalize(text)
    if not norm:
        return np.zeros(0, dtype=np.uint64)
    codes = np.frombuffer(norm.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)  # [C]
    width = min(k, len(codes))
    h = np.zeros(len(codes) - width + 1, dtype=np.uint64)  # [C - width + 1]
    for j in range(width):  # wraps modulo 2^64, as intended
        h = h * np.uint64(1_000_003) + codes[j:len(codes) - width + 1 + j]
    return np.unique(h)


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a & b| / |a | b|; two empty sets are 0.0 (an empty text is nobody's duplicate).

    {ab, bc, cd} vs {bc, cd, de}: 2 shared of 4 distinct = 0.5

    >>> jaccard(frozenset({"ab", "bc", "cd"}), frozenset({"bc", "cd", "de"}))
    0.5
    """
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def minhash_signatures(hashes: list[np.ndarray], k: int = MINHASH_K) -> np.ndarray:
    """[N, k] MinHash signatures of shingle-hash sets, with multiply-shift hash functions.

    For hash functions g(x) = (a * x + b) >> 32 (a odd, 64-bit arithmetic), the minimum of g
    over a set; two sets' signatures agree in a share of places that estimates their Jaccard
    similarity. An empty set gets all-max entries (and is never compared).
    """
    rng = np.random.default_rng(20240601)
    a = rng.integers(0, np.iinfo(np.int64).max, size=k, dtype=np.int64).astype(np.uint64) | np.uint64(1)  # [k]
    b = rng.integers(0, np.iinfo(np.int64).max, size=k, dtype=np.int64).astype(np.uint64)  # [k]
    sig = np.full((len(hashes), k), np.iinfo(np.uint64).max, dtype=np.uint64)
    for i, h in enumerate(hashes):
        if len(h):
            sig[i] = ((h[:, None] * a[None, :] + b[None, :]) >> np.uint64(32)).min(axis=0)  # [S, k] -> [k]
    return sig


class _Texts:
    """The texts' shingle hashes, signatures and (on demand) exact shingle sets."""

    def __init__(self, texts: list[str]):
        self.texts = texts
        self.hashes = [shingle_hashes(t) for t in texts]
        self.sig = minhash_signatures(self.hashes)  # [N, K]
        self._sets: dict[int, frozenset] = {}

    def set(self, i: int) -> frozenset:
        if i not in self._sets:
            self._sets[i] = shingles(self.texts[i])
        return self._sets[i]

    def estimates(self, i: int, lo: int) -> np.ndarray:
        """[i - lo] estimated similarity of text i with each of texts lo..i-1."""
        return (self.sig[lo:i] == self.sig[i]).mean(axis=1)


def near_duplicate_flags(texts: list[str], threshold: float, window: int) -> list[bool]:
    """For each text (oldest first): True when it is a near duplicate of one of the ``window`` before it.

    A pair whose estimate is above the band counts without an exact check: 400 long questions then
    cost ~0.1 s instead of the ~2 s of 40,000 exact comparisons.

    >>> near_duplicate_flags(["what is 2+2?", "What is 2+2 ?", "name a prime"], 0.5, 10)
    [False, True, False]
    """
    found = _Texts(texts)
    flags = []
    for i, h in enumerate(found.hashes):
        lo = max(0, i - window)
        if i == lo or not len(h):
            flags.append(False)
            continue
        estimate = found.estimates(i, lo)
        sure = bool((estimate >= threshold + EXACT_BAND).any())
        unsure = np.flatnonzero(np.abs(estimate - threshold) < EXACT_BAND) + lo
        flags.append(sure or any(jaccard(found.set(i), found.set(int(j))) >= threshold for j in unsure))
    return flags


def most_similar_earlier(texts: list[str], threshold: float, start: int = 0) -> dict[int, tuple[int, float]]:
    """{i: (j, similarity)} for each text i from ``start`` on that is a near duplicate of an earlier
    text: j the earlier text most similar to it (the latest of equals), with their exact similarity.

    "The Moon orbits the Earth." vs "the moon orbits the earth slowly": the first's 21 5-grams are all
    in the second's 28, so 21 / 28 = 0.75.

    >>> most_similar_earlier(["The Moon orbits the Earth.", "the moon orbits the earth slowly", "Sun"], 0.7)
    {1: (0, 0.75)}
    """
    found = _Texts(texts)
    out = {}
    for i in range(max(start, 1), len(texts)):
        if not len(found.hashes[i]):
            continue
        estimate = found.estimates(i, 0)
        near = np.flatnonzero(estimate > threshold - EXACT_BAND)
        best: tuple[int, float] | None = None
        for j in sorted(near, key=lambda j: (-estimate[j], -j))[:MOST_SIMILAR_CHECKED]:
            similarity = jaccard(found.set(i), found.set(int(j)))
            if similarity >= threshold and (best is None or (similarity, j) > (best[1], best[0])):
                best = (int(j), similarity)
        if best is not None:
            out[i] = best
    return out
