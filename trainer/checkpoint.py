"""Checkpoints: an explicit, atomic snapshot of everything a run needs to continue exactly.

A checkpoint is a folder ``<run_dir>/checkpoints/step-000012/`` holding

- ``model/``      the weights via safetensors: a full Hugging Face model folder (loadable with
                  ``from_pretrained``, tokenizer included) or, with LoRA, the adapter only;
                  separate policies: one adapter folder per role, ``model/<role>/``;
- ``engine.pt``   optimizer and LR-schedule state (separate policies: each role's, by name);
- ``state.pt``    step, RNG states (python, numpy, torch, cuda), the recipe's own state (data
                  cursor, replay buffers, baselines ...);
- ``config.yaml`` the run's config; ``meta.json`` step, method, model, LoRA rank, time.

It is written into a temporary folder and renamed into place, so a crash never leaves a
half-written checkpoint; only the newest ``keep_last`` are kept. When the disk has less room than
the newest checkpoint takes (the next one is as large), the oldest are removed first, never the
newest, so a full disk keeps fewer checkpoints instead of stopping the run (four 1.5B runs on one
GPU machine, ~18 GB a checkpoint with its optimizer state, filled its 235 GB disk); only when the
newest alone leaves too little room does the write fail, with ``CheckpointWriteError``.
``load_checkpoint`` refuses, with the reason, to resume a run whose method, model or LoRA rank
changed, or whose files are missing.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from trainer import distributed as dist
from trainer.config import Config, load_config, save_config

STEP_DIR = re.compile(r"^step-(\d{6,})$")
# Keys that must match for a resume to continue the same run.
IDENTITY = ("method", "model.name_or_path", "model.lora.r", "model.lora.target_modules", "model.policies", "seed")


class ResumeError(RuntimeError):
    """A resume that cannot continue; the message says why and what to do."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint that could not be written (disk full, quota, I/O error); the previous one is untouched."""


def _write_failure(folder: Path, step: int, exc: BaseException) -> str:
    previous = list_checkpoints(folder.parent)
    kept = f"the previous checkpoint {previous[-1].name} is intact" if previous else "there is no earlier checkpoint"
    return (f"could not write checkpoint step-{step:06d} in {folder}: {exc}; {kept} and the partial files were "
            "removed. Free disk space (or move the run folder to a larger disk), then resume the run")


def rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], np_state[1].tolist(), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_tuplify(state["python"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _tuplify(x):
    return tuple(_tuplify(i) for i in x) if isinstance(x, (list, tuple)) else x


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    folder = checkpoints_dir(run_dir)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and STEP_DIR.match(p.name) and (p / "meta.json").is_file()]
    return sorted(found, key=lambda p: int(STEP_DIR.match(p.name).group(1)))


def save_weights(policy, folder: Path, state_dict: dict | None = None) -> None:
    """Adapter (LoRA) or full model + tokenizer, as safetensors (``state_dict``: consolidated
    weights when the model's own parameters are partitioned, ZeRO-3)."""
    folder.mkdir(parents=True, exist_ok=True)
    policy.model.save_pretrained(folder, safe_serialization=True, **({"state_dict": state_dict} if state_dict else {}))
    if not policy.is_lora:
        policy.tokenizer.save_pretrained(folder)


def load_weights(policy, folder: Path) -> None:
    """Load weights written by ``save_weights`` into an already built policy (same shapes)."""
    from safetensors.torch import load_file

    if policy.is_lora:
        from peft import set_peft_model_state_dict

        for role in getattr(policy, "roles", ()) or (None,):  # separate policies: each role's adapter from its own folder
            file = (folder / role if role else folder) / "adapter_model.safetensors"
            _require(file)
            set_peft_model_state_dict(policy.model, load_file(file, device=str(policy.device)),
                                      **({"adapter_name": role} if role else {}))
        return
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ResumeError(f"no weights (*.safetensors) in {folder}; the checkpoint is incomplete, delete it")
    state = {}
    for f in files:
        state.update(load_file(f, device=str(policy.device)))
    missing, unexpected = policy.model.load_state_dict(state, strict=False)
    tied = {k for k in missing if _is_tied(policy.model, k)}
    if set(missing) - tied or unexpected:
        raise ResumeError(f"checkpoint weights do not fit the model: missing {sorted(set(missing) - tied)[:5]}, "
                          f"unexpected {sorted(unexpected)[:5]}")


def _is_tied(model, key: str) -> bool:
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return key in tied and getattr(model.config, "tie_word_embeddings", False)


def _require(path: Path) -> None:
    if not path.exists():
        raise ResumeError(f"{path} is missing: the checkpoint is incomplete; delete {path.parent} to resume from the one before")


def save_checkpoint(run_dir: str | Path, step: int, cfg: Config, policy, engine, recipe_state: dict | None = None,
                    keep_last: int | None = None, on_make_room=None) -> Path:
    """Write checkpoint ``step`` atomically and prune old ones; returns its folder.

    ``on_make_room(removed, need, free)`` is called when older checkpoints were removed early to
    fit this one (``make_room``). Several ranks: every rank must call it (the engine state and
    ZeRO-3 weights are gathered collectively); rank 0 writes the files, the others wait until they
    are in place."""
    folder = checkpoints_dir(run_dir)
    final = folder / f"step-{step:06d}"
    engine_state = engine.state_dict()
    weights = _partitioned_weights(engine)
    if not dist.is_main():
        dist.barrier()
        return final
    try:
        folder.mkdir(parents=True, exist_ok=True)
        removed, need, free = make_room(folder)
        if removed and on_make_room is not None:
            on_make_room(removed, need, free)
        _write_checkpoint(folder, final, step, cfg, policy, engine_state, weights, recipe_state, keep_last)
    finally:
        dist.barrier()
    return final


def _partitioned_weights(engine) -> dict | None:
    """Consolidated weights when the engine partitions them (ZeRO-3; a collective), else None."""
    if getattr(engine, "zero_stage", None) == 3:
        return engine.model_state_dict()
    return None


def _write_checkpoint(folder: Path, final: Path, step: int, cfg: Config, policy, engine_state: dict,
                      weights: dict | None, recipe_state: dict | None, keep_last: int | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_weights(policy, tmp / "model", weights)
        torch.save(engine_state, tmp / "engine.pt")
        torch.save({"step": step, "rng": rng_state(), "recipe": recipe_state or {}}, tmp / "state.pt")
        save_config(cfg, tmp / "config.yaml")
        meta = {"step": step, "method": cfg.method, "model": cfg.model.name_or_path, "lora_r": cfg.model.lora.r,
                "time": time.time()}
        if getattr(policy, "roles", ()):  # separate policies: model/<role>/ each; an evaluation loads the answering role's
            meta.update(roles=list(policy.roles), answer_role=cfg.section.answer_role)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    except Exception as exc:  # disk full and friends: the previous checkpoint is untouched
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(_write_failure(folder, step, exc)) from exc
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(folder, keep_last if keep_last is not None else cfg.checkpoint.keep_last)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def disk_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def make_room(folder: Path, margin: float = 1.05) -> tuple[list[str], int, int]:
    """Before a checkpoint is written into ``folder``: while the disk has less free space than the newest
    checkpoint's size x ``margin``, remove the oldest checkpoint, never the newest. Returns (removed folder
    names, bytes needed, bytes free after)."""
    done = list_checkpoints(folder.parent)
    if not done:
        return [], 0, disk_free(folder)
    need = int(folder_bytes(done[-1]) * margin)
    removed = []
    while len(done) > 1 and disk_free(folder) < need:
        old = done.pop(0)
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old.name)
    return removed, need, disk_free(folder)


def _prune(folder: Path, keep_last: int) -> None:
    done = list_checkpoints(folder.parent)
    for old in done[: max(0, len(done) - keep_last)]:
        shutil.rmtree(old, ignore_errors=True)


def _get(cfg: Config, dotted: str):
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _identity(cfg: Config, key: str):
    value = _get(cfg, key)
    if key == "model.name_or_path":  # a bundled name and its imported folder are one model
        from trainer.models import model_identity

        return model_identity(value)
    return value


def check_compatible(saved: Config, current: Config) -> None:
    """Raise ResumeError when the identity of the run changed (the model by what it is, not how
    it is spelled: ``trainer.models.model_identity``)."""
    diffs = [(k, _get(saved, k), _get(current, k)) for k in IDENTITY if _identity(saved, k) != _identity(current, k)]
    if diffs:
        lines = "; ".join(f"{k}: checkpoint has {a!r}, config has {b!r}" for k, a, b in diffs)
        raise ResumeError(f"cannot resume: the config changed what the run is ({lines}). "
                          "Use the original values, or start a new run in another --out folder.")


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    done = list_checkpoints(run_dir)
    return done[-1] if done else None


def load_checkpoint(path: str | Path, cfg: Config, policy, engine) -> dict:
    """Restore weights, engine and RNG from ``path``; returns {"step", "recipe"}."""
    path = Path(path)
    for name in ("meta.json", "config.yaml", "engine.pt", "state.pt", "model"):
        _require(path / name)
    check_compatible(load_config(path / "config.yaml"), cfg)
    if getattr(engine, "zero_stage", None) is None:
        load_weights(policy, path / "model")
    # else: a DeepSpeed engine's state holds every trainable weight in fp32 by name and writes
    # them into this run's partitioning (any GPU count) in load_state_dict below.
    engine.load_state_dict(torch.load(path / "engine.pt", map_location=policy.device, weights_only=True))
    state = torch.load(path / "state.pt", weights_only=True)
    set_rng_state(state["rng"])
    return {"step": int(state["step"]), "recipe": state.get("recipe", {})}
