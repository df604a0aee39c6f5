"""A replay buffer of validated questions with periodic reset (SSP, ssp.txt Appendix B.1).

Questions that passed every filter are added after their step. When a later step's Proposer
fails in a slot, the slot is refilled with a question drawn from the buffer, so the Solver
still trains on a full batch. Every ``reset_every`` steps the buffer is cleared, so the
Solver does not overfit a static pool and the Proposer must keep producing new questions
(the paper's "Replay Buffer (Periodic Reset)"; the reference code clears all entries,
keep_ratio 0, every 10 steps). A Solver batch replays one question at most ``max_repeats``
times (SSP's ``replay_max_repeats``, ours): at a 1-6% valid rate the buffer holds a handful of
questions, and drawing it again and again to fill 240 slots trained the Solver on each of them
dozens of times per step, the overfitting the paper's reset exists to prevent.

Entries are plain JSON-able dicts with a unique ``key``; ``state_dict()`` goes into the
checkpoint so a resumed run refills from the same pool.
"""
from __future__ import annotations

import random
from collections.abc import Iterable


class ReplayBuffer:
    def __init__(self, reset_every: int, capacity: int | None = None):
        if reset_every < 1:
            raise ValueError(f"reset_every must be >= 1, got {reset_every}")
        self.reset_every = reset_every
        self.capacity = capacity
        self.entries: list[dict] = []

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entries: Iterable[dict]) -> None:
        """Append entries (each a dict with a ``key``); the oldest go first beyond ``capacity``."""
        known = {e["key"] for e in self.entries}
        for e in entries:
            if "key" not in e:
                raise ValueError("replay entries need a 'key'")
            if e["key"] not in known:
                self.entries.append(dict(e))
                known.add(e["key"])
        if self.capacity is not None and len(self.entries) > self.capacity:
            self.entries = self.entries[-self.capacity:]

    def remove(self, keys: Iterable[str]) -> int:
        """Drop entries by key (a flagged question must never be replayed); returns how many."""
        drop = set(keys)
        before = len(self.entries)
        self.entries = [e for e in self.entries if e["key"] not in drop]
        return before - len(self.entries)

    def sample(self, n: int, rng: random.Random, max_repeats: int | None = None) -> list[dict]:
        """Entries for ``n`` failed slots: without replacement while the buffer lasts, then drawn
        again (each entry used as evenly as possible), each entry at most ``max_repeats`` times
        (None = no cap). Returns fewer than ``n`` when the cap binds: 3 entries, n=50, max 2 -> 6.
        Empty buffer -> []."""
        if not self.entries or n <= 0:
            return []
        if max_repeats is not None:
            if max_repeats < 1:
                raise ValueError(f"max_repeats must be >= 1 or None, got {max_repeats}")
            n = min(n, max_repeats * len(self.entries))
        out: list[dict] = []
        while len(out) < n:
            out += rng.sample(self.entries, min(n - len(out), len(self.entries)))
        return out

    def end_step(self, step: int) -> bool:
        """Call after step ``step`` (1-based) finished: clears every ``reset_every`` steps."""
        if step % self.reset_every == 0:
            self.entries = []
            return True
        return False

    def state_dict(self) -> dict:
        return {"reset_every": self.reset_every, "entries": [dict(e) for e in self.entries]}

    def load_state_dict(self, state: dict) -> None:
        self.entries = [dict(e) for e in state.get("entries", [])]
