"""Small pure helpers the recipes share (SCOPE, SCORE, pi-Play; SSP and SPICE's task checks).

- ``stratified_counts`` / ``stratified_draw``: split N prompts over categories in a fixed
  ratio (SCOPE's 4:3:2 search turns, pi-Play's 4:3:2:1 hops) by largest remainder, then
  shuffle, so every batch holds the ratio as closely as its size allows.
- ``tag_content``: the last non-empty ``<tag>`` body; ``assistant_texts``: a trajectory's model turns.
- ``schedule``: where a step falls in the papers' alternating stage blocks (SCOPE, pi-Play):
  iteration, stage and step within the stage; ``schedule_metrics`` reports them (role "schedule").
- ``mini_batches`` / ``update_in_mini_batches``: the papers' PPO mini-batches (SSP 128, SCORE 32
  prompts): a role's groups split into chunks, one optimizer step each, metrics averaged.
- ``truncated_rate``: share of generations that ended at their token budget, for roles whose
  generations are not trained (the update reports it for the trained ones, ``trainer.update``).
- ``zero_variance_groups``: share of a role's advantage groups whose rewards are all equal (no
  learning signal), the metric the watchdog's zero_variance rule reads for every role.
- ``answer_in_question`` / ``count_words``: the task checks SSP's rule filter and SPICE's task
  parser share (a question that states its own answer; a question with too few words).

The format-reward pieces (think fraction, valid searches) are ``trainer.rewards``'s.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence

from trainer.verify import extract_tag, normalize_answer, plain_number, same_number


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


def truncated_rate(generations: Sequence) -> float:
    """Share of completions / trajectories whose ``finish_reason`` is "length" (0.0 for none)."""
    return sum(g.finish_reason == "length" for g in generations) / len(generations) if generations else 0.0


def searches_refused(trajectories: Sequence) -> float:
    """Mean searches a trajectory had refused to keep its answer's reserve (``rollout.answer_reserve_tokens``)."""
    return sum(t.n_refused_searches for t in trajectories) / len(trajectories) if trajectories else 0.0


def zero_variance_groups(groups: Sequence[Sequence[float]]) -> float:
    """Share of the groups (of 2 or more rewards) whose rewards are all equal; 0.0 when none has 2.

    [[1, 1, 1], [0, 1, 0], [0.5, 0.5]] -> 2/3; a group of one reward has no variance to lose and
    is not counted ([[1], [0, 1]] -> 0.0)."""
    sized = [g for g in groups if len(g) >= 2]
    return sum(max(g) == min(g) for g in sized) / len(sized) if sized else 0.0


def schedule(step: int, first_steps: int, second_steps: int) -> tuple[int, int, int]:
    """(0-based iteration, stage 0 | 1, 0-based step within the stage) of a 1-based step, for
    iterations of ``first_steps`` steps of the first role then ``second_steps`` of the second.

    20 + 20: step 1 -> (0, 0, 0); step 21 -> (0, 1, 0); step 40 -> (0, 1, 19); step 41 -> (1, 0, 0).
    """
    iteration, offset = divmod(step - 1, first_steps + second_steps)
    return (iteration, 0, offset) if offset < first_steps else (iteration, 1, offset - first_steps)


def schedule_metrics(step: int, first_steps: int, second_steps: int) -> dict[str, float]:
    """Role "schedule" metrics for the run page: iteration (1-based), stage (1 = the first role's
    block, 2 = the second's) and the step within the stage (1-based)."""
    iteration, stage, within = schedule(step, first_steps, second_steps)
    return {"iteration": float(iteration + 1), "stage": float(stage + 1), "stage_step": float(within + 1)}


def mini_batches(groups: Sequence[Sequence], size: int) -> list[list]:
    """Consecutive groups (one prompt's samples each) joined into chunks of ``size`` groups.

    5 groups, size 2 -> chunks of groups [0, 1], [2, 3], [4]."""
    return [[x for g in groups[i:i + size] for x in g] for i in range(0, len(groups), size)]


def update_in_mini_batches(ctx, chunks_by_role: dict[str, list[list]]) -> dict[str, dict[str, float]]:
    """Each role in turn (dict order), one optimizer step per chunk; metrics averaged over the chunks,
    plus ``optimizer_steps``."""
    out: dict[str, dict[str, float]] = {}
    for role, chunks in chunks_by_role.items():
        out.update(average_updates([ctx.update(c) for c in chunks if c], only=role))
    return out


def average_updates(updates: Sequence[dict[str, dict[str, float]]], only: str | None = None
                    ) -> dict[str, dict[str, float]]:
    """Several optimizer steps' metrics (``ctx.update``'s, role -> metrics) averaged per role over the steps that
    trained it, plus ``optimizer_steps`` (how many did); ``only``: that role alone."""
    out: dict[str, dict[str, float]] = {}
    for role in dict.fromkeys(r for u in updates for r in u if only in (None, r)):
        runs = [u[role] for u in updates if role in u]
        out[role] = {**{k: sum(r.get(k, 0.0) for r in runs) / len(runs) for k in runs[0]},
                     "optimizer_steps": float(len(runs))}
    return out


# ---- task checks (SSP's rule filter, SPICE's task parser) ---------------------------------------

_QUESTION_NUMBER = re.compile(r"(?<![\d.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def count_words(text: str, letters_only: bool = True) -> int:
    """Whitespace-separated tokens of ``text``; with ``letters_only`` only those holding a letter.

    "In 1453, how many ships?" -> 4 (5 tokens); "123456, 123456}, 123456" -> 0 (3 tokens).
    SSP's reference code counts every token (``letters_only=False``); SPICE counts words, so a
    "question" of digits has none."""
    tokens = (text or "").split()
    return sum(any(c.isalpha() for c in t) for t in tokens) if letters_only else len(tokens)


def answer_in_question(question: str, answer: str, whole_words: bool = True) -> bool:
    """Does ``question`` state its own ``answer``, so that a solver could copy it?

    Compared as the graders compare answers (trainer.verify): SQuAD-normalized text (case,
    punctuation, articles and whitespace ignored), numbers by value.
    - ``whole_words`` (SPICE): a plain-number answer equals a number of the question by value
      ("5,000 km" holds 5000, "50.2 million" holds 50.2, "in 1556" does not hold 1; "1990s" holds
      1990, as the grader reads "1990s" as 1990); any other answer is a run of whole normalized
      words of the question ("the island Sulawesi?" holds "Sulawesi", "Romeo" does not hold "Rome").
    - not ``whole_words`` (SSP's reference code: ``answer.lower() in question.lower()``): the
      normalized answer is a substring of the normalized question, numbers included.
    An answer that normalizes to nothing (only punctuation or articles) is never in the question."""
    if whole_words:
        value = plain_number(answer)
        if value is not None:
            return any(same_number(plain_number(m.group(0)), value)
                       for m in _QUESTION_NUMBER.finditer(question or "") if plain_number(m.group(0)) is not None)
    a, q = normalize_answer(answer).split(), normalize_answer(question).split()
    if not a:
        return False
    if not whole_words:
        return " ".join(a) in " ".join(q)
    return any(q[i:i + len(a)] == a for i in range(len(q) - len(a) + 1))
