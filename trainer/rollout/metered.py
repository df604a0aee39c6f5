"""A generator wrapper that meters what rollouts cost (the runner's per-step ``system`` metrics; the one-step
overlap's rollout thread meters its own generator the same way)."""
from __future__ import annotations

import time


class MeteredGenerator:
    """Counts what the rollouts cost: tokens generated, seconds spent, and (vLLM) the weight
    push and its check. ``take()`` returns the counts since the last call (one step's worth)."""

    def __init__(self, inner):
        self.inner = inner
        self.tokens, self.seconds, self.calls = 0, 0.0, 0
        self.captures, self.capture_seconds = 0, 0.0
        self._sync_seen = 0.0

    def generate(self, prompts, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.inner.generate(prompts, *args, **kwargs)
        self.seconds += time.perf_counter() - t0
        self.tokens += sum(len(c.completion_ids) for c in out)
        self.calls += 1
        last = getattr(self.inner, "last_stats", None) or {}  # HFGenerator: this call's CUDA-graph captures
        self.captures += int(last.get("graph_captures", 0))
        self.capture_seconds += float(last.get("capture_seconds", 0.0))
        return out

    def take(self) -> dict[str, float]:
        """This step's rollout costs: tokens, seconds, generate calls, CUDA-graph captures and their
        seconds (part of rollout_seconds), and the weight push (vLLM)."""
        stats = getattr(self.inner, "stats", None) or {}
        sync = float(stats.get("sync_seconds", 0.0)) + float(stats.get("verify_seconds", 0.0))
        out = {"rollout_tokens": self.tokens, "rollout_seconds": self.seconds, "rollout_calls": self.calls,
               "graph_captures": self.captures, "graph_capture_seconds": self.capture_seconds,
               "weight_sync_seconds": sync - self._sync_seen}
        self.tokens, self.seconds, self.calls, self._sync_seen = 0, 0.0, 0, sync
        self.captures, self.capture_seconds = 0, 0.0
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)
