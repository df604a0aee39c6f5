"""``run(config)``: build the parts of a run (policy, engine, generator, sinks), resume if
asked, call the method's recipe, and return a ``RunResult``.

The run folder (``run_dir``) gets ``config.yaml``, ``metrics.jsonl``, ``samples.jsonl``,
``checkpoints.jsonl`` and ``checkpoints/step-*/``. With ``resume=True`` the run continues
from its newest checkpoint: weights, optimizer, schedule, RNG and the recipe's state (data
cursor, replay buffers) are restored, so the following steps are those an uninterrupted
run would have taken.
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from trainer.checkpoint import ResumeError, latest_checkpoint, list_checkpoints, load_checkpoint
from trainer.config import Config, load_config, save_config
from trainer.context import RecipeContext
from trainer.engine import make_engine
from trainer.methods import get_recipe
from trainer.models import data_dir, load_policy
from trainer.sink import JsonlSink, MultiSink


@dataclass
class RunResult:
    steps: int  # last completed step
    step_seconds: list[float]  # one per step run in this call
    final_checkpoint: str | None
    run_dir: str = ""
    stopped: bool = False  # ended early on a stop/pause request
    metrics: list[dict] = field(default_factory=list)  # every metrics row of this call


class _Recorder:
    """Keeps the metric rows of this call for the RunResult."""

    def __init__(self):
        self.rows = []

    def metrics(self, step, role, values):
        self.rows.append({"step": step, "role": role, **values})

    def samples(self, step, records):
        pass

    def checkpoint(self, step, path):
        pass

    def control(self):
        from trainer.sink import Control

        return Control()


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


def make_generator(cfg: Config, policy):
    if cfg.rollout.backend == "vllm":
        try:
            from trainer.rollout.vllm_backend import VLLMGenerator
        except ImportError as exc:
            raise RuntimeError(f"rollout.backend=vllm is not available ({exc}); install the gpu extra "
                               "or set rollout.backend=hf") from None
        return VLLMGenerator.from_policy(policy, cfg)
    from trainer.rollout import HFGenerator

    # No seed: sampling draws from the global torch RNG, which checkpoints save and restore.
    # from_policy also takes the policy's autocast (bf16 on GPU), so rollout log-probs match ours.
    build = getattr(HFGenerator, "from_policy", None)
    return build(policy) if build else HFGenerator(policy.model, policy.tokenizer)


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
    run_dir = Path(run_dir) if run_dir else default_run_dir(cfg)
    checkpoint = _check_run_dir(run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    apply_thread_setting()
    seed_everything(cfg.seed)

    policy = policy or load_policy(cfg, allowed_dirs=allowed_dirs)
    engine = make_engine(cfg, policy)
    generator = make_generator(cfg, policy)
    if retriever is None:
        retriever = _standalone_retriever(cfg)
    if documents is None and retriever is not None and hasattr(retriever, "sample"):
        documents = retriever  # the standalone BM25 retriever is also a DocumentSource
    recorder = _Recorder()
    ctx = RecipeContext(config=cfg, policy=policy, generator=generator, engine=engine,
                        sink=MultiSink(sink, JsonlSink(run_dir), recorder), retriever=retriever,
                        documents=documents, run_dir=run_dir)
    if checkpoint is not None:
        loaded = load_checkpoint(checkpoint, cfg, policy, engine)
        ctx.restore(loaded["recipe"], loaded["step"])
    get_recipe(cfg.method)(ctx)
    final = ctx.final_checkpoint or (str(latest_checkpoint(run_dir)) if latest_checkpoint(run_dir) else None)
    return RunResult(steps=ctx._last_step, step_seconds=list(ctx.step_seconds), final_checkpoint=final, run_dir=str(run_dir), stopped=ctx.stopped,
                     metrics=recorder.rows)


def _preflight(cfg: Config) -> None:
    """Cheap input checks before minutes of model loading (they raise DataError / CorpusError)."""
    if cfg.method == "grpo":
        from trainer.data import load_prompt_set

        load_prompt_set(cfg.data.path, cfg.grpo.prompt_key, cfg.grpo.answer_key, cfg.data.limit)
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
