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

``BackgroundSaver`` (``checkpoint.background``, the default) takes the step loop off the write: the
loop waits only while the weights, optimizer state, RNG and recipe state are copied to host memory
(``take_snapshot``; collective parts such as DeepSpeed's gather run here, on every rank), then rank 0
writes that copy in a thread (``write_snapshot``: the same temporary folder, fsync and rename). At most
one write is in flight: the next save first waits for the previous one. A process killed mid-write
leaves only a ``.tmp-step-*`` folder, which ``list_checkpoints`` never returns (and the next write
removes); the previous checkpoint is untouched.
"""
from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
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
    """Write checkpoint ``step`` atomically and prune old ones; returns its folder (the loop waits
    for the whole write; ``BackgroundSaver`` is the asynchronous form).

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
        snap = Snapshot(folder=folder, final=final, step=step, cfg=cfg, policy=policy, engine_state=engine_state,
                        weights=weights, recipe_state=recipe_state or {}, rng=rng_state(), keep_last=keep_last)
        write_snapshot(snap, on_make_room)
    finally:
        dist.barrier()
    return final


def _partitioned_weights(engine) -> dict | None:
    """Consolidated weights when the engine partitions them (ZeRO-3; a collective), else None."""
    if getattr(engine, "zero_stage", None) == 3:
        return engine.model_state_dict()
    return None


@dataclass
class Snapshot:
    """What one checkpoint holds, ready to write. Taken by ``take_snapshot`` every tensor in it is a
    host-memory copy, so writing it reads nothing the training loop goes on changing (the policy is
    used only for its config, tokenizer and ``save_pretrained``, never its live weights)."""

    folder: Path
    final: Path
    step: int
    cfg: Config
    policy: object
    engine_state: dict
    weights: dict | None  # None: save_weights reads the live model (synchronous saves only)
    recipe_state: dict
    rng: dict
    keep_last: int | None = None
    taken_at: float = field(default_factory=time.time)


class HostCopier:
    """Copies nested state (dicts, lists, tuples of tensors and plain values) into host memory.

    Buffers are kept by their place in the state and reused by the next save of the same shapes
    (pinned when the source is on a GPU, so the device-to-host copies run at full speed and
    asynchronously, with one synchronisation at the end). Tensors that share storage (tied
    embeddings) share one copy. Only safe while no write still reads the previous copy:
    ``BackgroundSaver`` waits for it first."""

    def __init__(self):
        self._buffers: dict[str, torch.Tensor] = {}
        self.bytes = 0

    def copy(self, state, prefix: str = ""):
        memo: dict = {}
        cuda = [False]
        out = self._copy(state, prefix, memo, cuda)
        if cuda[0]:
            torch.cuda.synchronize()
        return out

    def _copy(self, obj, key: str, memo: dict, cuda: list):
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj, key, memo, cuda)
        if isinstance(obj, dict):
            return {k: self._copy(v, f"{key}/{k}", memo, cuda) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._copy(v, f"{key}/{i}", memo, cuda) for i, v in enumerate(obj)]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self._copy(v, f"{key}/{i}", memo, cuda) for i, v in enumerate(obj))
        return copy.deepcopy(obj)

    def _tensor(self, t: torch.Tensor, key: str, memo: dict, cuda: list) -> torch.Tensor:
        t = t.detach()
        alias = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype,
                 t.device) if t.numel() else None
        if alias is not None and alias in memo:
            return memo[alias]
        buf = self._buffers.get(key)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = None
            if t.device.type == "cuda":
                try:
                    buf = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                except RuntimeError:  # page-locked memory refused (a low memlock limit): pageable, slower copies
                    buf = None
            if buf is None:
                buf = torch.empty(t.shape, dtype=t.dtype, device="cpu")
            self._buffers[key] = buf
        buf.copy_(t, non_blocking=t.device.type == "cuda")
        cuda[0] = cuda[0] or t.device.type == "cuda"
        self.bytes += buf.numel() * buf.element_size()
        if alias is not None:
            memo[alias] = buf
        return buf


def _live_weights(policy, engine) -> dict | None:
    """The weights a checkpoint writes, as tensors of the live model (not yet copied): the whole
    model, or with LoRA the adapter's entries only (what ``PeftModel.save_pretrained`` keeps: its
    ``lora_`` / ``modules_to_save`` / trainable-token entries, every trainable one, and the embeddings
    when LoRA targets them); None under ZeRO-3, whose gathered copy is already private."""
    if getattr(engine, "zero_stage", None) == 3:
        return None
    model = policy.model
    state = model.state_dict()
    if not policy.is_lora:
        return state
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    tags = ("lora_", "modules_to_save", "trainable_tokens")
    embeddings = ()
    for conf in getattr(model, "peft_config", {}).values():
        targets = getattr(conf, "target_modules", None) or ()
        if not isinstance(targets, str):
            embeddings += tuple(t for t in targets if t in ("embed_tokens", "lm_head", "wte", "embed_in", "embed_out"))
    return {k: v for k, v in state.items()
            if k in trainable or any(t in k for t in tags) or any(f"{e}." in k for e in embeddings)}


def take_snapshot(run_dir: str | Path, step: int, cfg: Config, policy, engine, recipe_state: dict | None = None,
                  keep_last: int | None = None, copier: HostCopier | None = None) -> Snapshot | None:
    """Copy everything checkpoint ``step`` holds into host memory (the part of a background save the
    step loop waits for). Every rank calls it (DeepSpeed's engine state and ZeRO-3 weights are
    gathered collectively, already as private host copies); rank 0 gets the snapshot, others None."""
    copier = copier or HostCopier()
    engine_state = engine.state_dict()
    weights = _partitioned_weights(engine)
    if not dist.is_main():
        return None
    if weights is None:
        weights = copier.copy(_live_weights(policy, engine), "weights")
    if getattr(engine, "zero_stage", None) is None:  # DeepSpeed's state_dict() already holds host clones
        engine_state = copier.copy(engine_state, "engine")
    folder = checkpoints_dir(run_dir)
    return Snapshot(folder=folder, final=folder / f"step-{step:06d}", step=step, cfg=cfg, policy=policy,
                    engine_state=engine_state, weights=weights, recipe_state=copier.copy(recipe_state or {}, "recipe"),
                    rng=rng_state(), keep_last=keep_last)


def write_snapshot(snap: Snapshot, on_make_room=None) -> None:
    """Write a snapshot as checkpoint folder ``snap.final`` (rank 0; no collectives, so it may run in a
    thread): make room, write into a temporary folder, fsync, rename, prune."""
    snap.folder.mkdir(parents=True, exist_ok=True)
    removed, need, free = make_room(snap.folder)
    if removed and on_make_room is not None:
        on_make_room(removed, need, free)
    _write_checkpoint(snap)


def _write_checkpoint(snap: Snapshot) -> None:
    folder, final, step, cfg, policy = snap.folder, snap.final, snap.step, snap.cfg, snap.policy
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp(folder)
    tmp = folder / f".tmp-step-{step:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        save_weights(policy, tmp / "model", snap.weights)
        torch.save(snap.engine_state, tmp / "engine.pt")
        torch.save({"step": step, "rng": snap.rng, "recipe": snap.recipe_state or {}}, tmp / "state.pt")
        save_config(cfg, tmp / "config.yaml")
        meta = {"step": step, "method": cfg.method, "model": cfg.model.name_or_path, "lora_r": cfg.model.lora.r,
                "time": snap.taken_at}
        if getattr(policy, "roles", ()):  # separate policies: model/<role>/ each; an evaluation loads the answering role's
            meta.update(roles=list(policy.roles), answer_role=cfg.section.answer_role)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        _fsync_tree(tmp)  # on disk before the rename makes it the newest checkpoint (a power loss, not only a kill)
    except Exception as exc:  # disk full and friends: the previous checkpoint is untouched
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(_write_failure(folder, step, exc)) from exc
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(folder)
    _prune(folder, snap.keep_last if snap.keep_last is not None else cfg.checkpoint.keep_last)


TEMP_DIR = re.compile(r"^\.tmp-step-\d{6,}-(\d+)$")


def _remove_stale_temp(folder: Path) -> None:
    """Remove temporary folders left by a process that died mid-write (never one of a live process)."""
    for p in folder.iterdir():
        m = TEMP_DIR.match(p.name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class SaveResult:
    """One finished checkpoint write: where, how long the loop waited for its copy, how long the write
    took (in the background), what ``make_room`` removed, and the error if it failed."""

    step: int
    path: str
    blocked_seconds: float
    write_seconds: float = 0.0
    made_room: list = field(default_factory=list)
    error: BaseException | None = None


class BackgroundSaver:
    """Checkpoint saves off the step loop's critical path: ``save`` copies the state to host memory
    (the loop waits for that only) and rank 0 writes the copy in a thread. At most one write is in
    flight: ``save`` first waits for the previous one. ``poll`` hands out finished writes without
    waiting, ``wait`` waits for the one in flight; both raise the write's ``CheckpointWriteError``.
    The thread is not a daemon: an interpreter that exits (even on an error) first finishes the write."""

    def __init__(self):
        self.copier = HostCopier()
        self._thread: threading.Thread | None = None
        self._running: SaveResult | None = None
        self._done: list[SaveResult] = []

    @property
    def in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def save(self, run_dir: str | Path, step: int, cfg: Config, policy, engine, recipe_state: dict | None = None,
             keep_last: int | None = None) -> tuple[Path, list[SaveResult]]:
        """Start checkpoint ``step``; returns its (future) folder and the writes that finished meanwhile
        (the previous one included: it is waited for first). Every rank calls it."""
        t0 = time.perf_counter()
        finished = self.wait()
        snap = take_snapshot(run_dir, step, cfg, policy, engine, recipe_state, keep_last, self.copier)
        final = checkpoints_dir(run_dir) / f"step-{step:06d}"
        result = SaveResult(step=step, path=str(final), blocked_seconds=0.0)
        if snap is not None:
            self._running = result
            self._thread = threading.Thread(target=self._write, args=(snap, result), name=f"checkpoint-{step}")
            self._thread.start()
        result.blocked_seconds = time.perf_counter() - t0
        if snap is None:  # another rank: nothing of its own to write
            finished.append(result)
        return final, finished

    def _write(self, snap: Snapshot, result: SaveResult) -> None:
        t0 = time.perf_counter()
        try:
            write_snapshot(snap, on_make_room=lambda *args: result.made_room.append(args))
        except BaseException as exc:  # handed to the loop by poll/wait
            result.error = exc
        finally:
            snap.weights = snap.engine_state = None
            result.write_seconds = time.perf_counter() - t0

    def poll(self) -> list[SaveResult]:
        """Finished writes since the last call, without waiting."""
        if self._thread is not None and not self._thread.is_alive():
            return self.wait()
        out, self._done = self._done, []
        return out

    def wait(self) -> list[SaveResult]:
        """Wait for the write in flight; returns every finished write not handed out yet."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._done.append(self._running)
            self._running = None
        out, self._done = self._done, []
        for result in out:
            if result.error is not None:
                raise result.error
        return out


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
