"""Small pure helpers the SCOPE, SCORE and pi-Play recipes share.

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


def truncated_rate(generations: Sequence) -> float:
    """Share of completions / trajectories whose ``finish_reason`` is "length" (0.0 for none)."""
    return sum(g.finish_reason == "length" for g in generations) / len(generations) if generations else 0.0


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
        runs = [ctx.update(c)[role] for c in chunks if c]
        if runs:
            out[role] = {k: sum(r.get(k, 0.0) for r in runs) / len(runs) for k in runs[0]}
            out[role]["optimizer_steps"] = float(len(runs))
    return out
