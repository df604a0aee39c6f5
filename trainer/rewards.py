"""The papers' reward formulas as pure functions (see specs/methods.md).

SPICE   ``spice_challenger`` (gaussian variance reward) and the ablations
        ``spice_absolute_zero``, ``spice_threshold``, ``spice_rzero_tent``; invalid task
        (``correct is None``) -> -0.1. ``SPICE_CHALLENGER_REWARDS`` / ``spice_reward_fn``.
SSP     ``ssp_proposer`` (1 - mean solver reward; filtered question -> 0),
        ``ssp_solver`` (0/1, quartered above 10 answer tags).
SCOPE   ``scope_f_diff``, ``scope_length_penalty``, ``scope_format_parts`` /
        ``scope_format_reward`` (think / tool / structure-or-answer, averaged),
        ``scope_search_reward``, ``scope_rubric_score``, ``scope_challenger_reward``,
        ``scope_solver_reward``.
SCORE   ``score_solver_reward`` = a(r) (1 + sum_j w_j s_j), ``score_consistency`` (mean
        pairwise TF-IDF cosine of the reports' conclusions; TF-IDF written here with numpy).
pi-Play ``piplay_difficulty`` = (n-k)/(n-1) for 0<k<n else 0, ``piplay_examiner_reward``.

The EMA baseline of SCORE's evaluator lives with the advantages (trainer.algos).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from trainer.verify import extract_tag

__all__ = [
    "SPICE_CHALLENGER_REWARDS",
    "piplay_difficulty",
    "piplay_examiner_reward",
    "scope_challenger_reward",
    "scope_f_diff",
    "scope_format_parts",
    "scope_format_reward",
    "scope_length_penalty",
    "scope_rubric_score",
    "scope_search_reward",
    "scope_solver_reward",
    "score_consistency",
    "score_solver_reward",
    "spice_absolute_zero",
    "spice_challenger",
    "spice_reward_fn",
    "spice_rzero_tent",
    "spice_threshold",
    "ssp_proposer",
    "ssp_solver",
    "tfidf_vectors",
    "think_fraction",
    "valid_searches",
]

# ================================================================== SPICE

SPICE_INVALID = -0.1


def _pass_rate(correct: Sequence[bool] | float) -> float:
    """The Reasoner's pass rate: the share of True in ``correct``, or ``correct`` itself when it is already a rate
    (the task gate passes a chance-corrected one, trainer/methods/gate.py)."""
    if isinstance(correct, (int, float)) and not isinstance(correct, bool):
        if not 0 <= correct <= 1:
            raise ValueError(f"a pass rate lies in [0, 1]; got {correct}")
        return float(correct)
    n = len(correct)
    if n == 0:
        raise ValueError("a valid task needs at least one Reasoner answer to score it; got an empty list")
    return sum(bool(c) for c in correct) / n


def spice_challenger(correct: Sequence[bool] | float | None, tau: float = 0.01, invalid: float = SPICE_INVALID) -> float:
    """SPICE gaussian variance reward exp(-(p(1-p) - 0.25)^2 / (2 tau)); None -> invalid.

    p is the Reasoner pass rate (the answers' verdicts, or the rate itself); the reward peaks at 1.0 for p = 0.5.
    """
    if correct is None:
        return invalid
    p = _pass_rate(correct)
    return math.exp(-((p * (1 - p) - 0.25) ** 2) / (2 * tau))


def spice_absolute_zero(correct: Sequence[bool] | float | None, invalid: float = SPICE_INVALID) -> float:
    """Absolute-Zero ablation: 1 - p if 0 < p < 1 else 0."""
    if correct is None:
        return invalid
    p = _pass_rate(correct)
    return 1 - p if 0 < p < 1 else 0.0


def spice_threshold(correct: Sequence[bool] | float | None, invalid: float = SPICE_INVALID) -> float:
    """Threshold ablation: 1 if some but not all answers are correct, else 0."""
    if correct is None:
        return invalid
    p = _pass_rate(correct)
    return 1.0 if 0 < p < 1 else 0.0


def spice_rzero_tent(correct: Sequence[bool] | float | None, invalid: float = SPICE_INVALID) -> float:
    """R-Zero tent ablation: 1 - 2 |p - 0.5|."""
    if correct is None:
        return invalid
    p = _pass_rate(correct)
    return 1 - 2 * abs(p - 0.5)


def control_rewards(ctx, rewards: Sequence[float]) -> list[float]:
    """The answering role's rewards as they are, or in a random-reward control (``train.control``) as many coin
    flips (``coin_flips`` with ``train.control_p``, drawn from a generator seeded by the run's RNG, which is left
    untouched when there is no control)."""
    train = ctx.config.train
    if train.control != "random-reward":
        return [float(r) for r in rewards]
    import random

    return coin_flips(len(rewards), train.control_p, random.Random(int(ctx.rng.integers(2**62))))


def coin_flips(n: int, p: float, rng) -> list[float]:
    """A random-reward control's rewards (``train.control: random-reward``): ``n`` independent flips, 1.0 with
    probability ``p`` else 0.0, drawn from ``rng`` (a ``random.Random``), whatever the answers were."""
    return [1.0 if rng.random() < p else 0.0 for _ in range(n)]


ChallengerReward = Callable[[Sequence[bool] | None], float]

SPICE_CHALLENGER_REWARDS: dict[str, Callable[..., float]] = {
    "gaussian": spice_challenger,
    "absolute_zero": spice_absolute_zero,
    "threshold": spice_threshold,
    "r_zero": spice_rzero_tent,
}


def spice_reward_fn(name: str, invalid: float = SPICE_INVALID, tau: float = 0.01) -> ChallengerReward:
    """The named Challenger reward with its parameters bound: ``fn(correct) -> float``."""
    try:
        fn = SPICE_CHALLENGER_REWARDS[name]
    except KeyError:
        raise ValueError(
            f"unknown SPICE challenger reward {name!r}; choose one of {sorted(SPICE_CHALLENGER_REWARDS)}"
        ) from None
    return partial(fn, tau=tau, invalid=invalid) if fn is spice_challenger else partial(fn, invalid=invalid)


# ================================================================== SSP


def ssp_proposer(solver_rewards: Sequence[float] | None, invalid: float = 0.0) -> float:
    """1 - mean(solver rewards); a question that failed the filters / RAG check (None) -> 0."""
    if solver_rewards is None:
        return invalid
    if len(solver_rewards) == 0:
        raise ValueError("ssp_proposer needs the solver rewards of at least one attempt (or None for a filtered question)")
    return 1.0 - sum(solver_rewards) / len(solver_rewards)


def ssp_solver(correct: bool, n_answer_tags: int, tag_limit: int = 10, divisor: float = 4.0) -> float:
    """1 if the answer is judged correct else 0; more than ``tag_limit`` answer tags -> / 4."""
    reward = 1.0 if correct else 0.0
    return reward / divisor if n_answer_tags > tag_limit else reward


# ================================================================== SCOPE


def scope_f_diff(mean_score: float, tau: float = 0.5) -> float:
    """Difficulty reward max(0, 1 - |g - tau| / min(tau, 1 - tau)); peaks at g = tau."""
    if not 0.0 < tau < 1.0:
        raise ValueError(f"the SCOPE difficulty target tau must lie strictly between 0 and 1, got {tau}")
    return max(0.0, 1.0 - abs(mean_score - tau) / min(tau, 1.0 - tau))


def scope_length_penalty(n_tokens: int, soft: int = 1024, hard: int = 2048, floor: float = 0.05) -> float:
    """Cosine length multiplier: 1 up to ``soft`` tokens, ``floor`` from ``hard``, and
    floor + (1 - floor)/2 * (1 + cos(pi (n - soft) / (hard - soft))) in between."""
    if hard <= soft:
        raise ValueError(f"length_hard ({hard}) must be greater than length_soft ({soft})")
    if n_tokens <= soft:
        return 1.0
    if n_tokens >= hard:
        return floor
    return floor + (1.0 - floor) / 2.0 * (1.0 + math.cos(math.pi * (n_tokens - soft) / (hard - soft)))


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL | re.IGNORECASE)


def has_think(turn: str) -> bool:
    """The turn contains a <think>...</think> block."""
    return bool(_THINK.search(turn))


def valid_searches(turn: str) -> int:
    """Well-formed <search>...</search> calls with non-empty content in one turn."""
    return sum(1 for q in _SEARCH.findall(turn) if q.strip())


def think_fraction(turns: Sequence[str]) -> float:
    """Fraction of assistant turns with a think block (0 for no turns)."""
    return sum(has_think(t) for t in turns) / len(turns) if turns else 0.0


def _challenger_parts(turns: Sequence[str], expected_searches: int | None) -> dict[str, float]:
    """SCOPE F.1: think fraction, search turns / expected (<= 1), final <task><question>."""
    if expected_searches is None or expected_searches < 1:
        raise ValueError(f"the Challenger's expected search count must be at least 1, got {expected_searches}")
    search_turns = sum(1 for t in turns if valid_searches(t) > 0)
    task = extract_tag(turns[-1], "task") if turns else None
    question = extract_tag(task, "question") if task is not None else None
    return {
        "think": think_fraction(turns),
        "tool": min(search_turns / expected_searches, 1.0),
        "structure": 1.0 if question else 0.0,
    }


def _solver_parts(turns: Sequence[str], expected_searches: int | None = None) -> dict[str, float]:
    """SCOPE F.2: think fraction, valid searches in non-final turns / (turns - 1) (<= 1),
    final <answer>. A one-turn answer has no non-final turn: tool = 0 (ours)."""
    searches = sum(valid_searches(t) for t in turns[:-1])
    answer = extract_tag(turns[-1], "answer") if turns else None
    return {
        "think": think_fraction(turns),
        "tool": min(searches / max(len(turns) - 1, 1), 1.0),
        "answer": 1.0 if answer else 0.0,
    }


_FORMAT_PARTS = {"challenger": _challenger_parts, "solver": _solver_parts}


def scope_format_parts(turns: Sequence[str], role: str, expected_searches: int | None = None) -> dict[str, float]:
    """The three format components of one rollout, given its assistant turns' texts."""
    try:
        parts_fn = _FORMAT_PARTS[role]
    except KeyError:
        raise ValueError(f"unknown SCOPE role {role!r}; choose one of {sorted(_FORMAT_PARTS)}") from None
    return parts_fn([t if isinstance(t, str) else "" for t in turns], expected_searches)


def scope_format_reward(turns: Sequence[str], role: str, expected_searches: int | None = None) -> float:
    """r_fmt = mean of the three format components (in [0, 1])."""
    parts = scope_format_parts(turns, role, expected_searches)
    return sum(parts.values()) / len(parts)


def scope_search_reward(n_valid_searches: int, cap: int = 3) -> float:
    """min(valid searches / 3, 1) over all turns (SCOPE F.2)."""
    return min(n_valid_searches / cap, 1.0)


def scope_rubric_score(passed: Sequence[bool]) -> float:
    """g = fraction of rubrics passed (weights 1)."""
    if len(passed) == 0:
        raise ValueError("a rubric score needs at least one graded rubric")
    return sum(bool(p) for p in passed) / len(passed)


_GATE_FAILURE_WEIGHT = {"half_format": None, "format": 1.0}  # None = the format weight (0.5)


def scope_challenger_reward(
    r_fmt: float,
    gate_passed: bool,
    mean_score: float | None,
    tau: float = 0.5,
    format_weight: float = 0.5,
    difficulty_weight: float = 1.0,
    gate_failure: str = "half_format",
) -> float:
    """R_C = 0.5 r_fmt + 1.0 * gate * f_diff(mean g).

    Gate failure: 0.5 r_fmt (``half_format``, the paper's Eq. 4 with the gate term 0) or r_fmt
    (``format``, the paper's Algorithm 1, line 14: the two disagree). r_fmt = 0 gives 0 (paper F.1: such rollouts get zero total reward).
    """
    if r_fmt <= 0.0:
        return 0.0
    if not gate_passed:
        if gate_failure not in _GATE_FAILURE_WEIGHT:
            raise ValueError(f"unknown gate_failure {gate_failure!r}; choose one of {sorted(_GATE_FAILURE_WEIGHT)}")
        weight = _GATE_FAILURE_WEIGHT[gate_failure]
        return (format_weight if weight is None else weight) * r_fmt
    if mean_score is None:
        raise ValueError("a task that passed the gates needs the Solver's mean rubric score")
    return format_weight * r_fmt + difficulty_weight * scope_f_diff(mean_score, tau)


def scope_solver_reward(
    rubric_score: float,
    n_answer_tokens: int,
    r_fmt: float,
    n_searches: int,
    rubric_weight: float = 1.0,
    format_weight: float = 0.5,
    search_weight: float = 0.1,
    search_cap: int = 3,
    soft: int = 1024,
    hard: int = 2048,
    floor: float = 0.05,
) -> float:
    """R_S = 1.0 L(|a|) g + 0.5 r_fmt + 0.1 min(searches / 3, 1)."""
    length = scope_length_penalty(n_answer_tokens, soft, hard, floor)
    return (
        rubric_weight * length * rubric_score
        + format_weight * r_fmt
        + search_weight * scope_search_reward(n_searches, search_cap)
    )


# ================================================================== SCORE


def score_solver_reward(well_formed: bool, weights: Sequence[float], scores: Sequence[float]) -> float:
    """R_s = a(r) (1 + sum_j w_j s_j), a(r) = 1 for a well-formed report else 0."""
    if len(weights) != len(scores):
        raise ValueError(f"one score per rubric dimension: got {len(weights)} weights and {len(scores)} scores")
    if not well_formed:
        return 0.0
    return 1.0 + sum(w * s for w, s in zip(weights, scores))


_WORD = re.compile(r"\w+", re.UNICODE)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_DOC_HEADER = re.compile(r"Doc \d+ \(Title: ")  # the search tool's own "Doc 1 (Title: ...)", not a passage's number


def _number_set(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def grounded_share(report, passages, min_overlap: float = 0.7, min_words: int = 4) -> tuple[float, int]:
    """The share of a report's sentences that its retrieved passages support, and how many sentences were read.

    A sentence (split at . ! ? followed by space, and at line breaks) is read when it has at least ``min_words``
    content words (words of 3+ letters outside the search stopwords, and every number). It is supported when every
    number in it (read whole: "1.4", "32,000" = "32000") occurs in the passages and at least ``min_overlap`` of its
    content words do. A claim whose names, dates or numbers the passages never mention is unsupported; a paraphrase
    that keeps the passages' names and numbers passes. A report with no sentence to read scores 0.0 (nothing in it
    is grounded); so does anything that is not a string.

    What it cannot tell: words are matched as a set, so a negated or reordered claim built from the passages' own
    words passes; text without spaces between words (Chinese, Japanese) has no sentence it can read.
    """
    from trainer.tools.bm25 import STOPWORDS

    if not isinstance(report, str):
        return 0.0, 0
    texts = [_DOC_HEADER.sub("(", p) for p in passages or () if isinstance(p, str)]
    vocab, numbers_seen = set(), set()
    for p in texts:
        vocab.update(_tokens(p))
        numbers_seen |= _number_set(p)
    read = supported = 0
    for sentence in _SENTENCE_END.split(report):
        numbers = _number_set(sentence)
        words = [w for w in _tokens(sentence) if not any(c.isdigit() for c in w) and len(w) >= 3
                 and w not in STOPWORDS]
        if len(words) + len(numbers) < min_words:
            continue
        read += 1
        if numbers <= numbers_seen and sum(w in vocab for w in words) + len(numbers) >= min_overlap * (
                len(words) + len(numbers)):
            supported += 1
    return (supported / read if read else 0.0), read


def _tokens(text: str) -> list[str]:
    """Lowercased runs of word characters (letters, digits, underscore; any script)."""
    return _WORD.findall(text.lower()) if isinstance(text, str) else []


def tfidf_vectors(texts: Sequence[str]) -> np.ndarray:
    """L2-normalized TF-IDF rows, one per text, over the texts' own vocabulary. [K, |V|]

    tf = raw count of the term in the text; idf = ln((1 + K) / (1 + df)) + 1 (smoothed,
    as if one extra document held every term once; a term in every text keeps idf 1, so
    identical texts still have cosine 1). A text without tokens is a zero row.
    """
    counts = [Counter(_tokens(t)) for t in texts]
    vocab = sorted(set().union(*counts)) if counts else []
    if not vocab:
        return np.zeros((len(texts), 0))
    index = {term: j for j, term in enumerate(vocab)}
    tf = np.zeros((len(texts), len(vocab)))
    for i, c in enumerate(counts):
        for term, n in c.items():
            tf[i, index[term]] = n
    df = (tf > 0).sum(axis=0)
    idf = np.log((1 + len(texts)) / (1 + df)) + 1.0
    x = tf * idf
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def score_consistency(conclusions: Sequence[str]) -> float:
    """Mean pairwise cosine similarity of the conclusions' TF-IDF vectors, in [0, 1].

    A pair involving an empty conclusion scores 0 (no evidence of agreement).
    """
    if len(conclusions) < 2:
        raise ValueError(f"consistency compares reports pairwise: need at least 2 conclusions, got {len(conclusions)}")
    x = tfidf_vectors(conclusions)
    sims = [float(x[i] @ x[j]) for i, j in itertools.combinations(range(len(conclusions)), 2)]
    return min(1.0, max(0.0, sum(sims) / len(sims)))


# ================================================================== pi-Play


def piplay_difficulty(k: int, n: int) -> float:
    """Examiner difficulty r_d = (n - k)/(n - 1) if 0 < k < n else 0 (k of n attempts correct)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"piplay_difficulty needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    return (n - k) / (n - 1) if 0 < k < n else 0.0


def piplay_examiner_reward(k: int, n: int, r_fmt: float, format_weight: float = 0.5) -> float:
    """R = r_d + 0.5 r_fmt."""
    return piplay_difficulty(k, n) + format_weight * r_fmt
