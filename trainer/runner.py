"""``run(config)``: build the parts of a run (policy, engine, generator, sinks), resume if
asked, call the method's recipe, and return a ``RunResult``.

The run folder (``run_dir``) gets ``config.yaml``, ``metrics.jsonl``, ``samples.jsonl``,
``checkpoints.jsonl`` and ``checkpoints/step-*/``. With ``resume=True`` the run continues
from its newest checkpoint: weights, optimizer, schedule, RNG and the recipe's state (data
cursor, replay buffers) are restored, so the following steps are those an uninterrupted
run would have taken.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trainer import distributed as dist
from trainer.checkpoint import ResumeError, latest_checkpoint, list_checkpoints, load_checkpoint
from trainer.config import Config, ConfigError, load_config, save_config
from trainer.context import RecipeContext
from trainer.engine import make_engine
from trainer.method_configs import SECTIONS
from trainer.methods import get_recipe
from trainer.models import data_dir, load_policy
from trainer.overlap import STATE_KEY as OVERLAP_STATE_KEY
from trainer.overlap import OneStepOverlap, resolve_overlap
from trainer.report import make_reporter
from trainer.rollout.metered import MeteredGenerator
from trainer.sink import JsonlSink, MultiSink, NullSink


class GpuMemoryError(RuntimeError):
    """The GPU ran out of memory during a run; the message says at which step, what held the card's memory, which
    settings to lower and what was kept."""


def gpu_memory_message(cfg: Config, exc: BaseException, step: int, checkpoint: Path | None) -> str:
    """One message for a CUDA out-of-memory error: torch's own first sentences (the allocation, the card's total
    and free memory, and every process holding memory on it: a run beside other runs sees them named), without its
    allocator advice, then the run's settings that size its memory and what was kept.
    On 2026-11-28 a SCOPE run on an H200 shared with two other 1.5B runs failed this way in its update."""
    text = " ".join(str(exc).split())
    for cut in (" Of the allocated memory", " If reserved but unallocated"):
        text = text.split(cut)[0]
    text = text.rstrip(". ")
    kept = (f"the last checkpoint {checkpoint.name} is intact: resuming continues from it" if checkpoint
            else "no checkpoint had been written yet")
    return (f"out of GPU memory in step {step}: {text}. Lower train.micro_batch_tokens (now "
            f"{cfg.train.micro_batch_tokens}: the update's tokens per micro-batch) or rollout.max_new_tokens (now "
            f"{cfg.rollout.max_new_tokens}), or give the run a GPU no other process shares; {kept}")


@dataclass
class RunResult:
    steps: int  # last completed step
    step_seconds: list[float]  # one per step run in this call
    final_checkpoint: str | None
    run_dir: str = ""
    stopped: bool = False  # ended early on a stop/pause request
    metrics: list[dict] = field(default_factory=list)  # every metrics row of this call
    saves: dict = field(default_factory=dict)  # checkpoint saves of this call: count, blocked_seconds, write_seconds


class _Recorder(NullSink):
    """Keeps the metric rows of this call for the RunResult."""

    def __init__(self):
        self.rows = []

    def metrics(self, step, role, values):
        self.rows.append({"step": step, "role": role, **values})


def apply_thread_setting() -> None:
    """SELFPLAY_TORCH_THREADS caps torch's CPU threads (a shared, busy CPU thrashes with more)."""
    threads = os.environ.get("SELFPLAY_TORCH_THREADS")
    if threads:
        torch.set_num_threads(int(threads))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def default_run_dir(cfg: Config) -> Path:
    return data_dir() / "runs" / f"{cfg.method}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_generator(cfg: Config, policy, engine=None):
    """The rollout backend; under ZeRO-3 every generate() runs with the weights gathered."""
    if cfg.rollout.backend == "vllm":
        try:
            from trainer.rollout.vllm_backend import VLLMGenerator
        except ImportError as exc:
            raise RuntimeError(f"rollout.backend=vllm is not available ({exc}); install the gpu extra "
                               "or set rollout.backend=hf") from None
        with _gathered(engine):
            generator = VLLMGenerator.from_policy(policy, cfg, engine=engine)
    else:
        from trainer.rollout import HFGenerator

        # No seed: sampling draws from the global torch RNG, which checkpoints save and restore.
        # from_policy also takes the policy's autocast (bf16 on GPU), so rollout log-probs match ours.
        build = getattr(HFGenerator, "from_policy", None)
        generator = (build(policy, cuda_graphs=cfg.rollout.cuda_graphs) if build
                     else HFGenerator(policy.model, policy.tokenizer))
    if getattr(engine, "zero_stage", None) == 3:
        generator = GatheredGenerator(generator, engine)
    return MeteredGenerator(generator)


def _gathered(engine):
    return engine.gathered(hooks=False) if getattr(engine, "zero_stage", None) == 3 else contextlib.nullcontext()


class GatheredGenerator:
    """A generator whose calls see the full weights (ZeRO-3 partitions them between steps).

    Gathering is collective: every rank calls generate() the same number of times per step
    (the multi-rank recipes do: one call per rollout phase, even with nothing to generate)."""

    def __init__(self, inner, engine):
        self.inner, self.engine = inner, engine

    def generate(self, *args, **kwargs):
        with self.engine.gathered(hooks=False):
            return self.inner.generate(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _standalone_retriever(cfg: Config):
    if not cfg.corpus.path:
        return None
    from trainer.tools import InMemoryRetriever

    return InMemoryRetriever.from_jsonl(cfg.corpus.path)


def run(config: dict | Config | str | Path, sink=None, retriever=None, documents=None, *,
        run_dir: str | Path | None = None, resume: bool = False, overrides: list[str] | None = None,
        allowed_dirs=None, policy=None) -> RunResult:
    """Run a method end to end. ``policy`` may be passed to reuse an already loaded model."""
    cfg = load_config(config, overrides)
    _preflight(cfg)
    if dist.wanted():  # one of several ranks started by a launcher (python -m trainer run --gpus N)
        check_multi_rank(cfg, int(os.environ["WORLD_SIZE"]))
        dist.init_process_group()
    run_dir = Path(dist.broadcast_object(str(run_dir) if run_dir else str(default_run_dir(cfg))))
    checkpoint = _check_run_dir(run_dir, resume)
    if dist.is_main():
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    apply_thread_setting()
    seed_everything(cfg.seed)
    _seed_rank_sampling(cfg.seed, 0)

    policy = policy or load_policy(cfg, allowed_dirs=allowed_dirs)
    engine = make_engine(cfg, policy)
    generator = make_generator(cfg, policy, engine)
    if retriever is None:
        retriever = _standalone_retriever(cfg)
    if documents is None and retriever is not None and hasattr(retriever, "sample"):
        documents = retriever  # the standalone BM25 retriever is also a DocumentSource
    recorder = _Recorder()
    # train.report_to: TensorBoard event files / a W&B run beside the folder's JSONL (trainer/report.py)
    reporter = make_reporter(cfg, run_dir, resume=checkpoint is not None) if dist.is_main() else None
    # Rank 0 owns the sink and the run folder's files; the other ranks report through it.
    sinks = MultiSink(sink, JsonlSink(run_dir), recorder, reporter) if dist.is_main() else MultiSink(recorder)
    ctx = RecipeContext(config=cfg, policy=policy, generator=generator, engine=engine, sink=sinks,
                        retriever=retriever, documents=documents, run_dir=run_dir)
    if checkpoint is not None:
        loaded = load_checkpoint(checkpoint, cfg, policy, engine)
        ctx.restore(loaded["recipe"], loaded["step"])
        _seed_rank_sampling(cfg.seed, loaded["step"])
    overlap = resolve_overlap(cfg, policy.device.type, engine, policy)
    if overlap[0]:  # after the checkpoint's weights are in: the snapshot copies them
        ctx.overlap = OneStepOverlap(policy, cfg)
        ctx.overlap.restore(ctx.state)
    else:  # a run checkpointed with overlap, resumed without: its stored rollout is not used
        ctx.state.pop(OVERLAP_STATE_KEY, None)
    if dist.is_main():
        sinks.samples(ctx.start_step, [auto_settings_event(cfg, policy, engine, ctx.start_step, overlap)])
    try:
        try:
            try:
                get_recipe(cfg.method)(ctx)
            except torch.OutOfMemoryError as exc:  # say where, what held the memory and what to lower
                with contextlib.suppress(Exception):  # the checkpoint named is whole: a background write completes
                    ctx.wait_for_saves()
                raise GpuMemoryError(gpu_memory_message(cfg, exc, ctx._last_step + 1,
                                                        latest_checkpoint(run_dir))) from exc
        except BaseException:
            with contextlib.suppress(Exception):  # a background write in flight completes: an earlier, whole step
                ctx.wait_for_saves()
            raise
        finally:
            if ctx.overlap is not None:
                ctx.overlap.close()
        ctx.finish_saves()
    finally:  # after the last checkpoint's report (a background save reports when it completes)
        if reporter is not None:
            reporter.close()
    final = ctx.final_checkpoint or (str(latest_checkpoint(run_dir)) if latest_checkpoint(run_dir) else None)
    if dist.wanted():  # the ranks leave their group before the process exits (a group's worker thread still
        getattr(engine, "close", lambda: None)()  # alive at interpreter exit can abort it: SIGABRT)
        dist.shutdown()
    return RunResult(steps=ctx._last_step, step_seconds=list(ctx.step_seconds), final_checkpoint=final, run_dir=str(run_dir), stopped=ctx.stopped,
                     metrics=recorder.rows, saves=dict(ctx.save_totals))


def auto_settings_event(cfg: Config, policy, engine, step: int = 0, overlap: tuple[bool, str] | None = None) -> dict:
    """The run's ``event`` record saying what the speed settings became (``auto`` resolved by
    trainer/autotune.py, or as set): engine, packing, shared prompt, overlap, and why."""
    from trainer.autotune import describe
    from trainer.engine import deepspeed_importable

    device = policy.device.type
    picked = "deepspeed" if getattr(engine, "zero_stage", None) is not None else "torch"
    importable = picked == "deepspeed" or (device == "cuda" and deepspeed_importable())
    from trainer.update import gpu_memory, model_size

    message, data = describe(cfg.train, device, picked, importable, compiled=cfg.model.compile,
                             n_params=model_size(policy.base_model()), gpu_memory_bytes=gpu_memory(policy.device),
                             overlap=overlap)
    return {"kind": "event", "key": f"{step}:auto_settings", "step": step, "message": message,
            "data": {"what": "auto_settings", **data}}


def check_multi_rank(cfg: Config, ranks: int) -> None:
    """Refuse (ConfigError) a config that cannot run as ``ranks`` processes: only recipes that shard
    their step's inputs over ranks (``ctx.shard``; the section's ``multi_rank``) run on several GPUs."""
    if not cfg.section.multi_rank:
        sharded = [name for name, section in SECTIONS.items() if section.multi_rank]
        raise ConfigError([("method", f"{cfg.method} runs on one GPU; --gpus > 1 is supported for "
                                      f"{', '.join(sharded)} (run it with --gpus 1)")])
    if cfg.train.prompts_per_step < ranks:
        raise ConfigError([("train.prompts_per_step", f"{cfg.train.prompts_per_step} prompts cannot be shared by "
                                                      f"{ranks} GPUs; use at least {ranks} or fewer GPUs")])


def _seed_rank_sampling(seed: int, step: int) -> None:
    """Several ranks: each samples different completions (torch RNG per rank); the python and
    numpy RNGs that pick documents and prompts stay equal on every rank. Alone: unchanged."""
    if dist.wanted():
        torch.manual_seed(seed + 7919 * step + 104729 * dist.rank())


def _preflight(cfg: Config) -> None:
    """Cheap input checks before minutes of model loading (they raise DataError / CorpusError, and
    PathNotAllowed for a file outside the datasets folder of a web worker: trainer/paths.py)."""
    from trainer.paths import check_config

    check_config(cfg)
    if cfg.section.needs_prompt_set:
        from trainer.data import load_prompt_set

        load_prompt_set(cfg.data.path, cfg.section.prompt_key, cfg.section.answer_key, cfg.data.limit)
    if cfg.corpus.path:
        from trainer.tools import corpus_path

        corpus_path(cfg.corpus.path)


def _check_run_dir(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint to resume from (None for a fresh run); refuses ambiguous folders."""
    if resume:
        found = latest_checkpoint(run_dir)
        if found is None:
            raise ResumeError(f"nothing to resume in {run_dir}: it has no complete checkpoint "
                              "(run without --resume to start fresh)")
        return found
    if list_checkpoints(run_dir):
        raise ResumeError(f"{run_dir} already holds a run with checkpoints; pass --resume to continue it "
                          "or choose another --out folder")
    return None
