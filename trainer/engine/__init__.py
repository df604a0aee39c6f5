"""The optimizer step behind one interface, so recipes never touch an optimizer directly.

``Engine``: ``backward(loss)`` (accumulates over micro-batches), ``step() -> grad_norm``
(clip, optimizer step, schedule, zero the gradients), ``zero_grad()``, ``state_dict()`` /
``load_state_dict()`` for checkpoints, and the current ``lr``. ``TorchEngine`` is plain
PyTorch AdamW for CPU and one GPU; a DeepSpeed ZeRO engine implements the same interface.
``make_engine(cfg, policy)`` picks one from ``train.engine`` (``auto``: DeepSpeed on a GPU where it
imports, else torch; the rule is ``trainer.autotune.pick_engine``).
With separate policies it is a ``RoleEngines`` (trainer/engine/roles.py), one torch engine per role.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from trainer.autotune import pick_engine
from trainer.engine.torch_engine import TorchEngine, warmup_constant


@runtime_checkable
class Engine(Protocol):
    @property
    def lr(self) -> float: ...

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self) -> float: ...

    def zero_grad(self) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def deepspeed_importable() -> bool:
    """DeepSpeed and our engine over it import here (the gpu extra is installed)."""
    try:
        import trainer.engine.deepspeed_engine  # noqa: F401
        import deepspeed  # noqa: F401
    except ImportError:
        return False
    return True


def resolved_engine(cfg, device_type: str) -> str:
    """``train.engine`` with ``auto`` resolved for a policy on ``device_type``."""
    t = cfg.train
    if t.engine != "auto":
        return t.engine
    return pick_engine("auto", device_type, device_type == "cuda" and deepspeed_importable(),
                       zero_stage=t.zero_stage, lora=cfg.model.lora.r > 0, compiled=cfg.model.compile)


def make_engine(cfg, policy) -> Engine:
    """The engine named by ``train.engine`` over the policy's trainable parameters."""
    if getattr(policy, "roles", ()):  # separate policies: one optimizer per role's adapter
        from trainer.engine.roles import RoleEngines

        return RoleEngines.from_config(cfg, policy)
    if resolved_engine(cfg, policy.device.type) == "torch":
        return TorchEngine.from_config(cfg, policy.trainable_parameters())
    try:
        from trainer.engine.deepspeed_engine import DeepSpeedEngine
    except ImportError as exc:
        raise RuntimeError(
            f"train.engine=deepspeed is not available here ({exc}); install the gpu extra "
            "(pip install -e .[gpu]) or use train.engine=torch") from None
    return DeepSpeedEngine.from_config(cfg, policy)


__all__ = ["Engine", "TorchEngine", "deepspeed_importable", "make_engine", "resolved_engine", "warmup_constant"]
