"""``train.overlap: one_step``: the next step's rollout runs while this step's update runs.

The timeline of step t (weights W_k = after k optimizer steps)::

    main thread:   take batch t (sampled by W_{t-2}) | copy W_{t-1} into the snapshot | update -> W_t
    rollout thread:                                      sample batch t+1 with the snapshot (W_{t-1}) ...

so batch t+1 is sampled by W_{t-1} while the update of step t turns W_{t-1} into W_t, and step t+1 trains it
starting from W_t: one optimizer step of staleness (``staleness`` in the step's metrics; 0 at a run's first step,
whose batch is sampled before any update). ``OneStepOverlap`` holds:

- the snapshot: a copy of the trained model (``copy.deepcopy`` once, without the module hooks an engine put on
  the original; afterwards only the parameters that train are copied into it, so a LoRA run copies its adapters,
  a full fine-tune its weights: one more copy in memory);
- an ``HFGenerator`` over the snapshot with its own tokenizer copy and its own sampling RNG, seeded per step from
  ``seed`` and the step, so a step's batch does not depend on when the thread ran (the global RNG the
  update may draw from is not touched);
- one worker thread, and on a GPU its own CUDA stream: the rollout's kernels queue beside the update's. The
  stream waits for the weight copy (an event recorded after it); the next copy waits for the rollout (the main
  thread takes its result first). The rollout's KV cache gets ``OVERLAP_KV_FRACTION`` of the GPU memory free when
  the overlap starts (the update's activations need the rest); a batch that needs more decodes in chunks.

The step's ``rollout_seconds`` (role system) then overlap its ``update_seconds``: ``overhead_ratio`` = step /
(rollout + update) falls below 1 by as much as the two ran at once.

A checkpoint taken while a rollout is in flight waits for it and stores it (token ids, log-probs, texts, the
batch's records; ``state()``): a resumed run trains exactly the batch the uninterrupted run would have, with
staleness 1. The loss correction lives in the update (``policy_update(is_cap=...)``, ``rollout_is``): the PPO
reference is the trainer's own log-probs of the pre-update weights, and each token's advantage is weighted by
min(pi_trainer / pi_sampled, cap).
"""
from __future__ import annotations

import copy
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.autotune import OVERLAP_KV_FRACTION, overlap_is_cap, pick_overlap
from trainer.method_configs import SECTIONS
from trainer.rollout.types import Completion

STATE_KEY = "_overlap_rollout"  # the checkpointed rollout in flight (recipe state)
# A module's hooks, which the snapshot drops: the engine's (DeepSpeed's forward pre/post hooks call its timers and
# ZeRO bookkeeping), copied along by deepcopy, must not run from the rollout thread.
_HOOKS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
          "_forward_hooks_always_called", "_backward_hooks", "_backward_pre_hooks")


@dataclass
class Rollout:
    """A batch and its completions, sampled by the weights after ``version`` optimizer steps."""

    step: int  # the step that trains it
    version: int
    batch: list[dict]
    completions: list[Completion]
    gen_seconds: float
    index: list[int] = field(default_factory=list)  # each record's position in the step's whole batch
    wait_seconds: float = 0.0  # how long the step waited for it

    def to_state(self) -> dict:
        """Plain values (a checkpoint's state.pt is loaded with weights_only)."""
        return {"step": self.step, "version": self.version, "batch": self.batch, "index": self.index,
                "gen_seconds": self.gen_seconds,
                "completions": [{"prompt_ids": c.prompt_ids, "completion_ids": c.completion_ids,
                                 "logprobs": c.logprobs, "text": c.text, "finish_reason": c.finish_reason,
                                 "stop": c.stop, "temperature": c.temperature} for c in self.completions]}

    @classmethod
    def from_state(cls, state: dict) -> "Rollout":
        return cls(step=int(state["step"]), version=int(state["version"]), batch=list(state["batch"]),
                   completions=[Completion(**c) for c in state["completions"]], gen_seconds=float(state["gen_seconds"]),
                   index=list(state["index"]))


def resolve_overlap(cfg, device_type: str, engine=None, policy=None) -> tuple[bool, str]:
    """``train.overlap`` for this run: (on, why), by ``trainer.autotune.pick_overlap``."""
    t = cfg.train
    weight_bytes, gpu_bytes = 0, None
    if policy is not None and device_type == "cuda":
        weight_bytes = sum(p.numel() * p.element_size() for p in policy.model.parameters())
        gpu_bytes = torch.cuda.get_device_properties(policy.device).total_memory
    return pick_overlap(t.overlap, supported=SECTIONS[cfg.method].overlap, device_type=device_type,
                        rows=t.prompts_per_step * cfg.rollout.group_size, backend=cfg.rollout.backend, gpus=t.gpus,
                        zero_stage=getattr(engine, "zero_stage", None), old_logprobs=t.old_logprobs,
                        weight_bytes=weight_bytes, gpu_memory_bytes=gpu_bytes)


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of one step's rollout (a function of the run's seed and the step only)."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1, dtype=np.uint64)[0] >> 1)


class OneStepOverlap:
    """The snapshot, its generator and the rollout in flight (see the module docstring)."""

    def __init__(self, policy, cfg):
        from trainer.rollout import HFGenerator
        from trainer.rollout.metered import MeteredGenerator

        if getattr(policy, "roles", ()):
            raise ValueError("train.overlap one_step trains one policy; set model.policies=shared")
        self.cfg = cfg
        self.live = policy.model
        with torch.no_grad():
            self.snapshot = copy.deepcopy(policy.model)
        for module in self.snapshot.modules():
            if getattr(module, "_compiled_call_impl", None) is not None:  # model.compile: the copy runs eagerly
                module._compiled_call_impl = None
            for hooks in _HOOKS:  # DeepSpeed hooks the trained module's forward into its engine: not from this thread
                getattr(module, hooks, {}).clear()
        self.snapshot.requires_grad_(False)
        self.snapshot.eval()
        # the parameters an update changes, and their copies (frozen ones are copied once, by deepcopy)
        self.pairs = [(s, p) for s, p in zip(self.snapshot.parameters(), self.live.parameters()) if p.requires_grad]
        self.device = policy.device
        kv_budget = None  # a CPU: no limit, as a rollout alone
        if self.device.type == "cuda":  # the update's activations share the GPU while this rollout decodes
            kv_budget = max(1, int(OVERLAP_KV_FRACTION * torch.cuda.mem_get_info(self.device)[0]))
        self.generator = MeteredGenerator(HFGenerator(
            self.snapshot, copy.deepcopy(policy.tokenizer), autocast_dtype=getattr(policy, "autocast_dtype", None),
            cuda_graphs=cfg.rollout.cuda_graphs, seed=cfg.seed, kv_budget_bytes=kv_budget))
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.is_cap = overlap_is_cap(cfg.train.rollout_is_cap)
        self.version = -1  # optimizer steps of the weights in the snapshot (-1: not copied yet)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="overlap-rollout")
        self._pending: tuple[int, int, list[dict], list[int], Future] | None = None
        self._done: Rollout | None = None  # a finished rollout not yet taken (restored from a checkpoint)

    # -- weights ------------------------------------------------------------------------------
    def refresh(self, version: int) -> None:
        """Copy the live weights (after ``version`` optimizer steps) into the snapshot; a no-op when it has them.
        Call it only with no rollout in flight (``take`` first)."""
        if self._pending is not None:
            raise RuntimeError("the snapshot is being sampled from; take() the rollout in flight first")
        if version == self.version:
            return
        with torch.no_grad():
            for dst, src in self.pairs:
                dst.copy_(src)
        self.version = version

    # -- rollouts -----------------------------------------------------------------------------
    def submit(self, step: int, batch: list[dict], index: list[int], prompts: list[list[int]], params) -> None:
        """Start sampling ``prompts`` (the rows of ``batch``, which ``step`` trains) with the snapshot."""
        if self._pending is not None or self._done is not None:
            raise RuntimeError("one rollout in flight at a time")
        if self.version < 0:
            raise RuntimeError("refresh() the snapshot before the first rollout")
        ready = None
        if self.stream is not None:  # the rollout's stream waits for the weight copy queued on this one
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
        seed = step_seed(self.cfg.seed, step)

        def work():
            t0 = time.perf_counter()
            if self.stream is None:
                self.generator.inner.rng.manual_seed(seed)
                out = self.generator.generate(prompts, params)
            else:
                with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                    self.stream.wait_event(ready)
                    self.generator.inner.rng.manual_seed(seed)
                    out = self.generator.generate(prompts, params)  # ends in .tolist(): the stream is done
            return out, time.perf_counter() - t0

        self._pending = (step, self.version, batch, index, self._pool.submit(work))

    def has(self, step: int) -> bool:
        """A rollout for ``step`` is in flight or done."""
        held = self._done.step if self._done is not None else (self._pending[0] if self._pending else None)
        return held == step

    def take(self, step: int) -> Rollout:
        """The rollout of ``step`` (waits for it)."""
        if self._done is not None:
            done, self._done = self._done, None
        elif self._pending is not None:
            t0 = time.perf_counter()
            at, version, batch, index, future = self._pending
            self._pending = None
            completions, seconds = future.result()
            done = Rollout(step=at, version=version, batch=batch, completions=completions, gen_seconds=seconds,
                           index=index, wait_seconds=time.perf_counter() - t0)
        else:
            raise RuntimeError(f"no rollout for step {step}")
        if done.step != step:
            raise RuntimeError(f"the rollout in flight is step {done.step}'s, not step {step}'s")
        return done

    def state(self) -> dict:
        """For a checkpoint: the rollout in flight, finished (waits for it), as plain values; {} without one."""
        if self._pending is not None:
            self._done = self.take(self._pending[0])
        return {STATE_KEY: self._done.to_state()} if self._done is not None else {}

    def restore(self, recipe_state: dict) -> None:
        """Adopt the rollout a checkpoint stored (and drop it from the recipe state)."""
        stored = recipe_state.pop(STATE_KEY, None)
        if stored:
            self._done = Rollout.from_state(stored)

    def take_costs(self) -> dict[str, float]:
        return self.generator.take()

    def close(self) -> None:
        """Wait for a rollout in flight and stop the thread."""
        self._pool.shutdown(wait=True)
        self._pending = None
