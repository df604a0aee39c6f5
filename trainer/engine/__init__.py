"""The optimizer step behind one interface, so recipes never touch an optimizer directly.

``Engine``: ``backward(loss)`` (accumulates over micro-batches), ``step() -> grad_norm``
(clip, optimizer step, schedule, zero the gradients), ``zero_grad()``, ``state_dict()`` /
``load_state_dict()`` for checkpoints, and the current ``lr``. ``TorchEngine`` is plain
PyTorch AdamW for CPU and one GPU; a DeepSpeed ZeRO engine implements the same interface.
``make_engine(cfg, policy)`` picks one from ``train.engine``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

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


def make_engine(cfg, policy) -> Engine:
    """The engine named by ``train.engine`` over the policy's trainable parameters."""
    if cfg.train.engine == "torch":
        return TorchEngine.from_config(cfg, policy.trainable_parameters())
    try:
        from trainer.engine.deepspeed_engine import DeepSpeedEngine
    except ImportError as exc:
        raise RuntimeError(
            f"train.engine=deepspeed is not available here ({exc}); install the gpu extra "
            "(pip install -e .[gpu]) or use train.engine=torch") from None
    return DeepSpeedEngine.from_config(cfg, policy)


__all__ = ["Engine", "TorchEngine", "make_engine", "warmup_constant"]
