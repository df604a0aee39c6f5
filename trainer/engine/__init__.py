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

import math
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


def adapter_lr(cfg, policy) -> float:
    """The optimizer's peak learning rate: ``train.lr`` for a full fine-tune; for LoRA adapters
    ``model.lora.lr`` (auto: train.lr x sqrt(3) x hidden_size / alpha).

    An early Adam step moves every trained number by about lr. A full fine-tune step then lowers the
    loss by about lr x ||G||_1 for a weight of gradient G; an adapter's (B starts at zero, so its first
    steps move B, and the weight by s dB A, A ~ U(-1/sqrt(d), 1/sqrt(d)) at peft's init) by about
    alpha / (sqrt(3) d) of that. auto makes up that factor, so the papers' full fine-tune rates (1e-6)
    move an adapter's policy as far per step as they moved the papers' models. Measured on SmolLM2-135M
    (d 576, r 64, alpha 32, full fine-tune lr 1e-6; benchmarks/lora_lr.py): one step's objective gain of
    the adapter at 1e-6 is 0.034 of the full fine-tune's (the formula: 0.032), with rsLoRA scaling 0.27, at
    auto (3.1e-5) 1.07; after three steps the KL to the start is 0.001, 0.07 and 1.14 of the full
    fine-tune's."""
    lora = cfg.model.lora
    if lora.r == 0 or lora.lr == "train":
        return cfg.train.lr
    if lora.lr == "auto":
        hidden = policy.base_model().config.hidden_size
        return cfg.train.lr * math.sqrt(3) * hidden / lora.alpha
    return float(lora.lr)


def make_engine(cfg, policy) -> Engine:
    """The engine named by ``train.engine`` over the policy's trainable parameters, at ``adapter_lr``."""
    lr = adapter_lr(cfg, policy)
    if getattr(policy, "roles", ()):  # separate policies: one optimizer per role's adapter
        from trainer.engine.roles import RoleEngines

        return RoleEngines.from_config(cfg, policy, lr=lr)
    if resolved_engine(cfg, policy.device.type) == "torch":
        return TorchEngine.from_config(cfg, policy.trainable_parameters(), lr=lr)
    try:
        from trainer.engine.deepspeed_engine import DeepSpeedEngine
    except ImportError as exc:
        raise RuntimeError(
            f"train.engine=deepspeed is not available here ({exc}); install the gpu extra "
            "(pip install -e .[gpu]) or use train.engine=torch") from None
    return DeepSpeedEngine.from_config(cfg, policy, lr=lr)


__all__ = ["Engine", "TorchEngine", "adapter_lr", "deepspeed_importable", "make_engine", "resolved_engine", "warmup_constant"]
