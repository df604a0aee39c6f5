"""SCORE's DimensionScheduler (score.txt, Algorithm 1, lines 3, 8 and 34).

The paper gives the scheduler's interface, not its rules: ``GetConstraints()`` returns "the current
required / avoided dimensions and exploration hints" that go into the evaluator's rubric prompt next
to the meta-harness's constraints, and ``UpdateStats(H_t, {C_i})`` "records which dimensions produced
more reproducible rollouts". The rules below are ours, each one line of reasoning:

- avoided: a non-mandatory dimension the rubric held in each of the last ``streak`` (3) steps sits out
  the next step. A rubric that never changes is the paper's consistency-hacking sign (superficial
  rubrics that make any report look alike); rotating keeps the evaluator's choice a choice.
- required: a pool dimension never chosen in ``explore_after`` (10) steps is required for one step,
  the least-recently-tried first, so every dimension's consistency gets measured.
- hints: each tried dimension's mean consistency C over the steps it was in the rubric, highest
  first (what UpdateStats records), and the dimensions not tried yet.

The constraints narrow the harness for one step (``constrain``): required dimensions join the
harness's mandatory ones (within k), avoided ones leave the pool the rubric may draw from. A
harness, a person or the driver, still decides k, weights and the mandatory dimensions.
State is plain data (checkpointed with the recipe state).
"""
from __future__ import annotations

import copy


class DimensionScheduler:
    def __init__(self, pool: list[str], streak: int = 3, explore_after: int = 10):
        self.pool = list(pool)
        self.streak, self.explore_after = streak, explore_after
        self.steps = 0
        self.history: list[list[str]] = []  # the rubric's dimensions, newest last (last `streak` kept)
        self.count: dict[str, int] = {d: 0 for d in self.pool}
        self.mean_c: dict[str, float] = {}  # mean consistency over the steps a dimension was chosen
        self.last_seen: dict[str, int] = {}

    # -- Algorithm 1, line 8 --------------------------------------------------------------------
    def get_constraints(self, must: list[str]) -> tuple[list[str], list[str], str]:
        """(required, avoided, hints) for the next rubric."""
        avoided = []
        if len(self.history) >= self.streak:
            recent = self.history[-self.streak:]
            avoided = [d for d in self.pool if d not in must and all(d in dims for dims in recent)]
        required = []
        if self.steps >= self.explore_after:
            untried = [d for d in self.pool if d not in must and d not in avoided
                       and self.steps - self.last_seen.get(d, 0) >= self.explore_after]
            if untried:
                required = [min(untried, key=lambda d: (self.last_seen.get(d, 0), self.pool.index(d)))]
        tried = sorted(self.mean_c, key=lambda d: (-self.mean_c[d], d))
        hints = []
        if tried:
            hints.append("Mean consistency of reports under each dimension so far: "
                         + ", ".join(f"{d} {self.mean_c[d]:.2f}" for d in tried) + ".")
        fresh = [d for d in self.pool if d not in self.mean_c and d not in must]
        if fresh:
            hints.append("Not tried yet: " + ", ".join(fresh) + ".")
        return required, avoided, " ".join(hints)

    def constrain(self, harness: dict, pool: list[str], must: list[str]) -> tuple[dict, list[str], dict]:
        """(harness for this step, pool for this step, what the scheduler said) from ``get_constraints``."""
        required, avoided, hints = self.get_constraints(must)
        h = copy.deepcopy(harness)
        dc = h["dimension_constraints"]
        room = max(dc["k"] - len(dc["must_include"]), 0)
        required = [d for d in required if d not in dc["must_include"]][:room]
        dc["must_include"] = dc["must_include"] + required
        lines = []
        if required:
            lines.append(f"This step also requires: {', '.join(required)}.")
        if avoided:
            lines.append(f"Do not choose this step (chosen in each of the last {self.streak} steps): "
                         f"{', '.join(avoided)}.")
        if hints:
            lines.append(hints)
        h["notes"] = " ".join([h.get("notes", ""), *lines]).strip()
        step_pool = [d for d in pool if d not in avoided]
        if len(step_pool) < dc["k"]:  # too few left: avoid nothing rather than break the harness's k
            step_pool, avoided = list(pool), []
        return h, step_pool, {"required": required, "avoided": avoided, "hints": hints}

    # -- Algorithm 1, line 34 -------------------------------------------------------------------
    def update_stats(self, dims: list[str], consistencies: list[float]) -> None:
        """Record the rubric's dimensions and the batch's consistency C (mean over queries)."""
        self.steps += 1
        c = sum(consistencies) / len(consistencies) if consistencies else 0.0
        for d in dims:
            n = self.count.get(d, 0)
            self.mean_c[d] = (self.mean_c.get(d, 0.0) * n + c) / (n + 1)
            self.count[d] = n + 1
            self.last_seen[d] = self.steps
        self.history = (self.history + [list(dims)])[-self.streak:]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "history": self.history, "count": self.count, "mean_c": self.mean_c,
                "last_seen": self.last_seen}

    def load_state_dict(self, sd: dict) -> None:
        self.steps = int(sd.get("steps", 0))
        self.history = [list(h) for h in sd.get("history", [])]
        self.count = {**{d: 0 for d in self.pool}, **sd.get("count", {})}
        self.mean_c = dict(sd.get("mean_c", {}))
        self.last_seen = dict(sd.get("last_seen", {}))
