"""The task ledger of a run: how hard its generated tasks are, how many are invalid, how many repeat.

Read from ``apps.episodes.models.Task`` (one row per task a role wrote, with the solver's
``pass_rate`` and a ``valid`` flag):

- difficulty histogram: graded tasks (valid, with a pass rate) in ``BINS`` equal bins of
  pass rate, for the whole run and for the latest ``RECENT_STEPS`` steps that have tasks;
  the self-play target (a task the solver gets right half of the time) is ``TARGET``;
- invalid share: invalid tasks / all tasks, overall and per step;
- near-duplicate rate among recent tasks: the newest ``RECENT_TASKS`` questions (their first
  ``QUESTION_CHARS`` characters) in (step, id) order, each compared with the ``DUP_WINDOW``
  questions before it by the Jaccard similarity of their character ``SHINGLE``-gram sets; a
  question at or above ``DUP_THRESHOLD`` with any of them counts as a near duplicate. A cheap
  lexical measure (no embeddings: the corpus embedder costs seconds per page on a CPU): MinHash
  signatures estimate each pair, pairs near the threshold are checked exactly.

Per-step numbers are computed by Postgres (GROUP BY on the (run, step) index); only the
recent questions are read into Python.
"""
from __future__ import annotations

import re

import numpy as np
from django.db.models import Avg, Count, FloatField, IntegerField, Q
from django.db.models.functions import Cast, Floor, Least, Substr

from apps.episodes.models import Task

TARGET = 0.5
BAND = 0.25  # "near the target": pass rate within TARGET +- BAND
BINS = 10
RECENT_STEPS = 10
RECENT_TASKS = 400
DUP_WINDOW = 100
DUP_THRESHOLD = 0.7
SHINGLE = 5
QUESTION_CHARS = 500  # a question's first characters are what is compared (bounds the cost)
DUP_METHOD = (f"character {SHINGLE}-gram Jaccard similarity (first {QUESTION_CHARS} characters) "
              f"\u2265 {DUP_THRESHOLD} with one of the "
              f"{DUP_WINDOW} questions before it (lexical overlap by MinHash, exact near the threshold; "
              "not embeddings)")


# ---- pure parts ------------------------------------------------------------------------------

def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", (text or "").lower()).strip()


def shingles(text: str, k: int = SHINGLE) -> frozenset[str]:
    """The set of character k-grams of ``text`` (lower-cased, whitespace runs collapsed).

    >>> sorted(shingles("Ab  ab", 3))
    [' ab', 'ab ', 'b a']
    """
    norm = _normalize(text)
    if len(norm) <= k:
        return frozenset([norm]) if norm else frozenset()
    return frozenset(norm[i:i + k] for i in range(len(norm) - k + 1))


def shingle_hashes(text: str, k: int = SHINGLE) -> np.ndarray:
    """[S] the distinct 64-bit polynomial hashes of the same k-grams as ``shingles`` (deterministic).

    >>> len(shingle_hashes("Ab  ab", 3)), len(shingle_hashes("")), len(shingle_hashes("ab", 3))
    (3, 0, 1)
    """
    norm = _normalize(text)
    if not norm:
        return np.zeros(0, dtype=np.uint64)
    codes = np.frombuffer(norm.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)  # [C]
    width = min(k, len(codes))
    h = np.zeros(len(codes) - width + 1, dtype=np.uint64)  # [C - width + 1]
    for j in range(width):  # wraps modulo 2^64, as intended
        h = h * np.uint64(1_000_003) + codes[j:len(codes) - width + 1 + j]
    return np.unique(h)


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a & b| / |a | b|; two empty sets are 0.0 (an empty question is nobody's duplicate).

    {ab, bc, cd} vs {bc, cd, de}: 2 shared of 4 distinct = 0.5

    >>> jaccard(frozenset({"ab", "bc", "cd"}), frozenset({"bc", "cd", "de"}))
    0.5
    """
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def near_duplicate_flags(texts: list[str], threshold: float = DUP_THRESHOLD, window: int = DUP_WINDOW) -> list[bool]:
    """For each text (oldest first): True when it is a near duplicate of one of the ``window`` before it.

    MinHash signatures estimate every pair's Jaccard similarity (``MINHASH_K`` hashes: standard
    error <= 0.044); a pair whose estimate is within ``EXACT_BAND`` of the threshold is decided by
    the exact Jaccard of its shingle sets, the others by the estimate. 400 long questions then
    cost ~0.1 s instead of the ~2 s of 40,000 exact comparisons.

    >>> near_duplicate_flags(["what is 2+2?", "What is 2+2 ?", "name a prime"], 0.5, 10)
    [False, True, False]
    """
    hashes = [shingle_hashes(t) for t in texts]
    sig = minhash_signatures(hashes)  # [N, K]
    exact: dict[int, frozenset] = {}

    def sets(i: int) -> frozenset:
        if i not in exact:
            exact[i] = shingles(texts[i])
        return exact[i]

    flags = []
    for i, h in enumerate(hashes):
        lo = max(0, i - window)
        if i == lo or not len(h):
            flags.append(False)
            continue
        estimate = (sig[lo:i] == sig[i]).mean(axis=1)  # [i - lo]
        sure = bool((estimate >= threshold + EXACT_BAND).any())
        unsure = np.flatnonzero(np.abs(estimate - threshold) < EXACT_BAND) + lo
        flags.append(sure or any(jaccard(sets(i), sets(int(j))) >= threshold for j in unsure))
    return flags


MINHASH_K = 128
EXACT_BAND = 0.1  # ~2.3 standard errors of a 128-hash estimate (sqrt(0.25 / 128) = 0.044)


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


def bin_edges(bins: int = BINS) -> list[tuple[float, float]]:
    return [(round(i / bins, 6), round((i + 1) / bins, 6)) for i in range(bins)]


def bin_of(pass_rate: float, bins: int = BINS) -> int:
    """The histogram bin of a pass rate; 1.0 falls in the last bin, out-of-range rates are clamped.

    >>> [bin_of(r, 10) for r in (0.0, 0.05, 0.5, 0.99, 1.0)]
    [0, 0, 5, 9, 9]
    """
    return max(0, min(bins - 1, int(pass_rate * bins)))


# ---- from the database ----------------------------------------------------------------------

def _histogram(qs) -> list[int]:
    """Counts of graded tasks per pass-rate bin, computed by Postgres."""
    counts = [0] * BINS
    bucket = Least(Cast(Floor(Cast("pass_rate", FloatField()) * BINS), IntegerField()), BINS - 1)
    for b, n in qs.annotate(b=bucket).values("b").annotate(n=Count("id")).values_list("b", "n"):
        counts[max(0, min(BINS - 1, int(b)))] += n
    return counts


def _per_step(run_id: int) -> list[dict]:
    rows = (Task.objects.filter(run_id=run_id).values("step").order_by("step")
            .annotate(tasks=Count("id"), invalid=Count("id", filter=Q(valid=False)),
                      graded=Count("id", filter=Q(valid=True, pass_rate__isnull=False)),
                      pass_rate=Avg("pass_rate", filter=Q(valid=True))))
    return list(rows)


def duplicates(run_id: int) -> dict:
    """Near-duplicate flags of the newest ``RECENT_TASKS`` questions, overall and per step."""
    recent = list(Task.objects.filter(run_id=run_id).exclude(question="").order_by("-step", "-id")
                  .annotate(head=Substr("question", 1, QUESTION_CHARS)).values_list("step", "head")[:RECENT_TASKS])[::-1]
    flags = near_duplicate_flags([q for _, q in recent])
    by_step: dict[int, list[int]] = {}
    for (step, _), flag in zip(recent, flags):
        counted = by_step.setdefault(step, [0, 0])
        counted[0] += 1
        counted[1] += flag
    steps = sorted(by_step)
    return {"method": DUP_METHOD, "checked": len(recent), "duplicates": sum(flags),
            "rate": sum(flags) / len(flags) if flags else None,
            "steps": steps, "rate_by_step": [by_step[s][1] / by_step[s][0] for s in steps]}


def ledger(run) -> dict:
    """Everything the run page's task ledger draws (JSON-safe)."""
    run_id = getattr(run, "pk", run)
    per_step = _per_step(run_id)
    tasks = sum(r["tasks"] for r in per_step)
    invalid = sum(r["invalid"] for r in per_step)
    graded_qs = Task.objects.filter(run_id=run_id, valid=True, pass_rate__isnull=False)
    recent_steps = [r["step"] for r in per_step if r["graded"]][-RECENT_STEPS:]
    hist_all = _histogram(graded_qs)
    hist_recent = _histogram(graded_qs.filter(step__gte=recent_steps[0])) if recent_steps else [0] * BINS
    graded = sum(hist_all)
    near = graded_qs.filter(pass_rate__gte=TARGET - BAND, pass_rate__lte=TARGET + BAND).count()
    return {
        "target": TARGET,
        "bins": [{"lo": lo, "hi": hi, "all": a, "recent": r}
                 for (lo, hi), a, r in zip(bin_edges(), hist_all, hist_recent)],
        "recent_steps": [recent_steps[0], recent_steps[-1]] if recent_steps else None,
        "tasks": tasks, "invalid": invalid, "invalid_share": invalid / tasks if tasks else None,
        "graded": graded, "near_target": near, "near_target_share": near / graded if graded else None,
        "roles": sorted(set(Task.objects.filter(run_id=run_id).values_list("role", flat=True).distinct())),
        "steps": [r["step"] for r in per_step],
        "invalid_share_by_step": [r["invalid"] / r["tasks"] for r in per_step],
        "pass_rate_by_step": [r["pass_rate"] for r in per_step],
        "duplicates": duplicates(run_id),
    }
