"""``RecipeContext``: everything a recipe needs, and the step loop that times, logs,
checkpoints and listens to the sink.

A recipe is ``def run_<method>(ctx) -> None``::

    for step in ctx.steps():          # resumes after the last checkpoint; stops on request
        ...generate, reward...
        metrics = ctx.update(samples)  # {role: {...}}
        ctx.log(step, "solver", {...}) # flushed at the end of the step with step_seconds, wall_clock
        ctx.state["cursor"] = ...      # saved in every checkpoint, restored on resume

``ctx.state`` is the recipe's own resumable state (plain python values and tensors);
``ctx.rng`` is a seeded numpy Generator whose state is checkpointed too.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainer import distributed as dist
from trainer.checkpoint import BackgroundSaver, SaveResult, save_checkpoint
from trainer.sink import NullSink, Verdict
from trainer.update import policy_update


class GcClock:
    """Seconds Python's garbage collector ran in this process since the last ``take()`` (a ``gc.callbacks`` entry,
    installed once): a step's pause in a process holding many objects (a worker with Django loaded) shows up as
    ``gc_seconds`` beside the rollout and update times."""

    def __init__(self):
        self.seconds = 0.0
        self._started: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def gc_clock() -> GcClock:
    """This process's GcClock (installed into gc.callbacks on first use)."""
    for callback in gc.callbacks:
        if isinstance(callback, GcClock):
            return callback
    clock = GcClock()
    gc.callbacks.append(clock)
    return clock


@dataclass
class RecipeContext:
    config: Any  # trainer.config.Config
    policy: Any  # trainer.models.Policy
    generator: Any  # trainer.rollout Generator
    engine: Any  # trainer.engine.Engine
    sink: Any = field(default_factory=NullSink)
    retriever: Any = None  # trainer.tools.Retriever
    documents: Any = None  # trainer.tools DocumentSource
    run_dir: Path | None = None
    rng: np.random.Generator | None = None
    state: dict = field(default_factory=dict)
    start_step: int = 0  # last completed step (from a checkpoint)
    step_seconds: list[float] = field(default_factory=list)
    train_seconds: float = 0.0  # summed step time of the run (restored on resume): checkpoint.every_minutes
    final_checkpoint: str | None = None
    stopped: bool = False
    verdicts: list[Verdict] = field(default_factory=list)
    harness: dict | None = None
    overlap: Any = None  # trainer.overlap.OneStepOverlap where train.overlap resolved to one_step
    _pending: dict = field(default_factory=dict)
    _records: list = field(default_factory=list)
    _update_costs: dict = field(default_factory=lambda: {"update_tokens": 0, "update_seconds": 0.0})
    _last_step: int = 0
    _saver: BackgroundSaver | None = None
    _save_costs: dict = field(default_factory=lambda: {"save_blocked_seconds": 0.0, "save_write_seconds": 0.0})
    save_totals: dict = field(default_factory=lambda: {"saves": 0, "blocked_seconds": 0.0, "write_seconds": 0.0})

    def __post_init__(self):
        if self.rng is None:
            self.rng = np.random.default_rng(self.config.seed)
        self._last_step = self.start_step
        gc_clock().take()  # installed, and counting from here

    # -- the loop ---------------------------------------------------------------------------
    def steps(self):
        """Yield step numbers start_step+1 .. train.steps; after each: flush metrics, checkpoint
        when due, poll the sink (stop/pause, or train.time_limit_minutes passed, end the loop after a
        checkpoint)."""
        every = self.config.checkpoint.every
        every_s = self.config.checkpoint.every_minutes * 60
        total = self.config.train.steps
        limit = self.config.train.time_limit_minutes * 60
        started = time.perf_counter()
        for step in range(self.start_step + 1, total + 1):
            t0 = time.perf_counter()
            self._progress(step, "rollout")
            yield step
            seconds = time.perf_counter() - t0
            if dist.active():  # a step lasts as long as its slowest rank: one clock (a checkpoint is collective)
                seconds = max(dist.all_reduce([seconds], "max"))
            self.step_seconds.append(seconds)
            timed = every_s > 0 and timed_checkpoint_due(self.train_seconds, seconds, every_s)
            self.train_seconds += seconds
            self._collect_saves(wait=False)
            self._log_costs(step)
            self._last_step = step
            self._flush(step, seconds)
            control = self._control()
            self.verdicts.extend(control.verdicts)
            if control.harness is not None:
                self.harness = control.harness
            out_of_time = limit > 0 and step < total and time.perf_counter() - started >= limit
            if limit > 0 and dist.active():  # every rank stops at the same step
                out_of_time = max(dist.all_reduce([float(out_of_time)], "max")) > 0
            if control.stop or control.pause or out_of_time:
                self.stopped = True
                self.checkpoint(step)
                return
            if (step == total and self.config.checkpoint.final) or (every and step % every == 0) or timed:
                self.checkpoint(step)

    def _flush(self, step: int, seconds: float) -> None:
        pending = self._pending
        if dist.active():  # rank 0 reports for all: metrics combined, samples gathered
            pending = combine_rank_metrics(dist.gather_objects(pending))
            records = [r for rank_records in dist.gather_objects(self._records) for r in rank_records]
            if dist.is_main() and records:
                self.sink.samples(step, records)
            self._records = []
        if SYSTEM in pending:
            pending[SYSTEM] = with_overhead(with_rates(pending[SYSTEM]), seconds)
        now = time.time()  # the step's end on the wall clock: the compare view's "wall time" axis
        for role, values in pending.items():
            self.sink.metrics(step, role, {**values, "step_seconds": seconds, "wall_clock": now})
        self._pending = {}

    def _control(self):
        """The sink's answer (stop, pause, verdicts, harness); rank 0 asks, every rank hears it."""
        if not dist.active():
            return self.sink.control()
        return dist.broadcast_object(self.sink.control() if dist.is_main() else None)

    def _progress(self, step: int, phase: str) -> None:
        """Tell the sink where the step is (rank 0 only: one report per step and phase)."""
        if dist.is_main():
            self.sink.progress(step, phase)

    def shard(self, items) -> list:
        """This rank's share of a step's inputs (all of them in one process); see distributed.shard."""
        return dist.shard(items) if dist.active() else list(items)

    # -- reporting --------------------------------------------------------------------------
    def log(self, step: int, role: str, metrics: dict[str, float]) -> None:
        """Metrics of one role for this step (sent at the end of the step, with step_seconds)."""
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float, np.floating, np.integer))}
        self._pending.setdefault(role, {}).update(clean)

    def samples(self, step: int, records: list[dict]) -> None:
        if dist.active():
            self._records.extend(records)  # gathered to rank 0 at the end of the step
        elif records:
            self.sink.samples(step, records)

    def _log_costs(self, step: int) -> None:
        """Role ``system``: rollout tokens and seconds, weight sync, update tokens and seconds, the garbage
        collector's seconds since the previous step (``gc_seconds``, any of its parts); and the
        checkpoint saves since the previous step (``save_blocked_seconds``: the loop waited for them, between
        steps, so outside ``step_seconds``; ``save_write_seconds``: background writes that finished)."""
        take = getattr(self.generator, "take", None)
        costs = take() if callable(take) else {}
        if self.overlap is not None:  # the rollouts sampled beside the update (train.overlap)
            extra = self.overlap.take_costs()
            costs = {k: costs.get(k, 0) + extra.get(k, 0) for k in {**costs, **extra}}
        if costs or self._update_costs["update_seconds"]:
            self.log(step, SYSTEM, {**costs, **self._update_costs, "gc_seconds": gc_clock().take()})
        self._update_costs = {"update_tokens": 0, "update_seconds": 0.0}
        if any(self._save_costs.values()):
            self.log(step, SYSTEM, self._save_costs)
        self._save_costs = {"save_blocked_seconds": 0.0, "save_write_seconds": 0.0}

    def take_verdicts(self) -> list[Verdict]:
        """Human review verdicts received so far (each handed out once)."""
        out, self.verdicts = self.verdicts, []
        return out

    # -- training ---------------------------------------------------------------------------
    def update(self, samples, extra_loss=None) -> dict[str, dict[str, float]]:
        self._progress(self._last_step + 1, "update")
        t0 = time.perf_counter()
        is_cap = self.overlap.is_cap if self.overlap is not None else None  # samples one step stale: reweighted
        out = policy_update(self.policy, self.engine, samples, self.config, extra_loss=extra_loss, is_cap=is_cap)
        self._update_costs["update_seconds"] += time.perf_counter() - t0
        self._update_costs["update_tokens"] += sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
        return out

    def sampling_params(self, **overrides):
        from trainer.rollout import SamplingParams

        r = self.config.rollout
        base = dict(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                    min_new_tokens=r.min_new_tokens, logprobs=self.config.rollout_logprobs or self.overlap is not None)
        return SamplingParams(**{**base, **overrides})

    def checkpoint(self, step: int, extra_state: dict | None = None) -> str | None:
        """Save a checkpoint of this step (recipe state = ctx.state + extra_state). With
        ``checkpoint.background`` the loop waits only for the copy to host memory (and for a previous
        write still in flight); the write finishes in a thread, and the sink hears of the checkpoint
        once it is complete (``_collect_saves``: at a step's end, the next save, or ``finish_saves``)."""
        if self.run_dir is None:
            return None
        state = {**self.state, **(extra_state or {}), "_numpy_rng": self.rng.bit_generator.state,
                 "_train_seconds": self.train_seconds}
        if self.overlap is not None:  # the next step's rollout, in flight: waited for and stored
            state.update(self.overlap.state())
        if getattr(self.config.checkpoint, "background", False):
            if self._saver is None:
                self._saver = BackgroundSaver()
            path, finished = self._saver.save(self.run_dir, step, self.config, self.policy, self.engine, state)
            for result in finished:
                self._saved(result)
            return str(path)
        t0 = time.perf_counter()
        made_room = []
        path = save_checkpoint(self.run_dir, step, self.config, self.policy, self.engine, state,
                               on_make_room=lambda *args: made_room.append(args))
        seconds = time.perf_counter() - t0
        self._saved(SaveResult(step=step, path=str(path), blocked_seconds=seconds, write_seconds=seconds,
                               made_room=made_room))
        return str(path)

    def _collect_saves(self, wait: bool) -> None:
        """Report the background writes that finished (``wait``: the one in flight too)."""
        if self._saver is not None:
            for result in (self._saver.wait() if wait else self._saver.poll()):
                self._saved(result)

    def wait_for_saves(self) -> None:
        """Wait for the background write in flight, if any, and report it."""
        self._collect_saves(wait=True)

    def finish_saves(self) -> None:
        """The run's end: wait for the last write, report it, and (several ranks) hold every rank until
        rank 0's files are in place; then one event with the run's save totals."""
        self._collect_saves(wait=True)
        if self._saver is not None and dist.active():
            dist.barrier()
        totals = self.save_totals
        if totals["saves"] and dist.is_main():
            self.sink.samples(self._last_step, [{
                "kind": "event", "key": f"{self._last_step}:checkpoint_saves", "step": self._last_step,
                "message": f"{totals['saves']} checkpoint save(s): the step loop waited {totals['blocked_seconds']:.2f} s "
                           f"for them, the writes took {totals['write_seconds']:.2f} s"
                           + (" in the background" if self._saver is not None else ""),
                "data": {"what": "checkpoint_saves", "background": self._saver is not None, **totals}}])

    def _saved(self, result: SaveResult) -> None:
        """A checkpoint is complete on disk: tell the sink, count its cost."""
        step, path = result.step, result.path
        self.save_totals["saves"] += 1
        self.save_totals["blocked_seconds"] += result.blocked_seconds
        self.save_totals["write_seconds"] += result.write_seconds
        self._save_costs["save_blocked_seconds"] += result.blocked_seconds
        self._save_costs["save_write_seconds"] += result.write_seconds
        for removed, need, free in result.made_room:  # the disk holds fewer checkpoints than keep_last: say so
            gib = 1 << 30
            self.sink.samples(step, [{
                "kind": "event", "key": f"{step}:disk_made_room", "step": step,
                "message": f"disk nearly full: removed {', '.join(removed)} early to fit step {step}'s checkpoint "
                           f"({need / gib:.1f} GiB needed, {free / gib:.1f} GiB free now); fewer than "
                           f"checkpoint.keep_last={self.config.checkpoint.keep_last} are kept",
                "data": {"what": "disk_made_room", "removed": removed, "need_bytes": need, "free_bytes": free}}])
        self.final_checkpoint = str(path)
        self.sink.checkpoint(step, str(path))

    def restore(self, recipe_state: dict, step: int) -> None:
        """Apply a loaded checkpoint's recipe state (called by trainer.run on resume)."""
        state = dict(recipe_state)
        rng_state = state.pop("_numpy_rng", None)
        self.train_seconds = float(state.pop("_train_seconds", 0.0))
        if rng_state is not None:
            self.rng.bit_generator.state = rng_state
        self.state = state
        self.start_step = self._last_step = step


def timed_checkpoint_due(before: float, seconds: float, every_s: float) -> bool:
    """checkpoint.every_minutes: a step that ran from ``before`` to ``before + seconds`` of training time is
    checkpointed when it crossed a multiple of ``every_s`` (a fixed grid, so a long step never shifts the later
    checkpoints and a step crossing two multiples saves once)."""
    return every_s > 0 and (before + seconds) // every_s > before // every_s


SYSTEM = "system"  # the role of the run's own costs (not a player)
# Metrics that add up over ranks, and those whose extreme is the meaningful value.
SUMMED = {"samples", "tokens", "skipped", "tasks", "rollout_tokens", "update_tokens", "attempts", "documents_dropped",
          "documents_short", "retry_tokens", "graph_captures"}
MAXED = {"ratio_max", "gen_seconds", "update_seconds", "rollout_seconds", "weight_sync_seconds",
         "graph_capture_seconds", "save_blocked_seconds", "save_write_seconds"}
MINNED = {"ratio_min"}


def combine_rank_metrics(per_rank: list[dict]) -> dict:
    """{role: {name: value}} of every rank -> one dict: counts summed, time and ratio_max by max,
    ratio_min by min, everything else averaged over the ranks that logged it.

    [{"r": {"samples": 4, "reward": 1.0}}, {"r": {"samples": 4, "reward": 0.0}}]
    -> {"r": {"samples": 8, "reward": 0.5}}
    """
    out: dict = {}
    for role in dict.fromkeys(role for pending in per_rank for role in pending):
        rows = [pending[role] for pending in per_rank if role in pending]
        merged = {}
        for name in dict.fromkeys(k for row in rows for k in row):
            values = [row[name] for row in rows if name in row]
            if name in SUMMED:
                merged[name] = float(sum(values))
            elif name in MAXED:
                merged[name] = float(max(values))
            elif name in MINNED:
                merged[name] = float(min(values))
            else:
                merged[name] = float(sum(values) / len(values))
        out[role] = merged
    return out


def with_overhead(costs: dict, step_seconds: float) -> dict:
    """The step's time outside generation and the update (``other_seconds``: parsing, grading,
    search, logging, ...) and ``overhead_ratio`` = step / (rollout + update), the number issue 22
    holds at <= 1.3. 10 s step, 6 s rollout, 2 s update -> other 2.0, ratio 1.25."""
    out = dict(costs)
    busy = out.get("rollout_seconds", 0.0) + out.get("update_seconds", 0.0)
    if step_seconds > 0 and busy > 0:
        out["other_seconds"] = max(0.0, step_seconds - busy)
        out["overhead_ratio"] = step_seconds / busy
    return out


def with_rates(costs: dict) -> dict:
    """Tokens per second of the rollouts and of the update (all ranks together: summed tokens
    over the slowest rank's seconds). 1000 tokens in 0.5 s -> 2000.0."""
    out = dict(costs)
    for kind in ("rollout", "update"):
        secs = out.get(f"{kind}_seconds", 0.0)
        if secs > 0:
            out[f"{kind}_tokens_per_s"] = out.get(f"{kind}_tokens", 0.0) / secs
    return out
