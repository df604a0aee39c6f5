"""Plain PyTorch optimisation: AdamW, linear warmup then constant, global-norm clipping.

Gradients accumulate over micro-batches between ``step()`` calls (the update pass scales
each micro-batch loss by its share of the step, so no division happens here). A step whose
gradient norm is not finite is skipped (weights, optimizer and schedule untouched) and
reported as nan, so one bad batch cannot destroy a run.
"""
from __future__ import annotations

import math

import torch

from trainer.distributed import average_gradients


def warmup_constant(warmup_steps: int):
    """LR factor for optimizer step s (0-based): (s + 1) / (warmup + 1) during warmup, then 1.

    warmup 3 -> factors 0.25, 0.5, 0.75, 1, 1, ...; warmup 0 -> 1 from the first step.
    """

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / (warmup_steps + 1))

    return factor


class TorchEngine:
    def __init__(self, params, lr: float, warmup_steps: int = 0, grad_clip: float = 1.0,
                 weight_decay: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no trainable parameters: check model.lora settings")
        fused = all(p.is_cuda for p in self.params)  # fused kernel on GPU, multi-tensor (foreach) on CPU
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                           fused=fused or None, foreach=None if fused else True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_constant(warmup_steps))
        self.grad_clip = grad_clip
        self.steps = 0
        self.skipped = 0

    @classmethod
    def from_config(cls, cfg, params, lr: float | None = None) -> "TorchEngine":
        """``lr``: the peak rate when it is not train.lr (LoRA adapters, ``trainer.engine.adapter_lr``)."""
        t = cfg.train
        return cls(params, lr=t.lr if lr is None else lr, warmup_steps=t.warmup_steps, grad_clip=t.grad_clip,
                   weight_decay=t.weight_decay, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def grad_norm(self) -> float:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return 0.0
        return float(torch.nn.utils.get_total_norm(grads))

    def step(self) -> float:
        """Average over the ranks (multi-GPU), clip, step, advance the schedule, zero the
        gradients; returns the pre-clip norm."""
        average_gradients(self.params)
        if self.grad_clip > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        else:
            norm = self.grad_norm()
        if math.isfinite(norm):
            self.optimizer.step()
            self.scheduler.step()
            self.steps += 1
        else:
            self.skipped += 1
        self.zero_grad()
        return norm

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "steps": self.steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.steps = int(state["steps"])
        self.skipped = int(state.get("skipped", 0))
