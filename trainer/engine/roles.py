"""``RoleEngines``: one optimizer per role, for separate policies (``model.policies: separate``).

Each role's LoRA adapter has its own ``TorchEngine`` (AdamW state, LR schedule, step count), so
one role's update never moves another role's weights or moments. ``for_role(role)`` gives a
role's engine (``trainer.update.policy_update`` steps it with that role's samples only); the
checkpoint holds every role's state under its name and resume restores each.
"""
from __future__ import annotations

import torch

from trainer.engine.torch_engine import TorchEngine


class RoleEngines:
    zero_stage = None  # not partitioned: weights live in the model

    def __init__(self, engines: dict[str, TorchEngine]):
        if not engines:
            raise ValueError("separate policies need at least one role")
        self.engines = engines

    @classmethod
    def from_config(cls, cfg, policy, lr: float | None = None) -> "RoleEngines":
        engines = {}
        for role in policy.roles:
            with policy.acting(role):  # the active adapter is the one that requires gradients
                engines[role] = TorchEngine.from_config(cfg, list(policy.role_parameters(role).values()), lr=lr)
        return cls(engines)

    def for_role(self, role: str) -> TorchEngine:
        try:
            return self.engines[role]
        except KeyError:
            raise ValueError(f"role {role!r} has no optimizer of its own; the roles are {', '.join(self.engines)}") \
                from None

    @property
    def lr(self) -> float:
        return next(iter(self.engines.values())).lr

    @property
    def steps(self) -> int:
        """Optimizer steps of every role together (a change says the weights moved)."""
        return sum(e.steps for e in self.engines.values())

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        raise RuntimeError("separate policies step one role at a time: engine.for_role(role).step()")

    def zero_grad(self) -> None:
        for e in self.engines.values():
            e.zero_grad()

    def state_dict(self) -> dict:
        return {"roles": {role: e.state_dict() for role, e in self.engines.items()}}

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("roles")
        if not isinstance(saved, dict):
            raise ValueError("this checkpoint holds one optimizer for every role (model.policies=shared), but the run "
                             "has separate policies; resume with model.policies=shared or start a new run")
        missing = [r for r in self.engines if r not in saved]
        if missing:
            raise ValueError(f"the checkpoint has no optimizer state for role(s) {', '.join(missing)}")
        for role, e in self.engines.items():
            e.load_state_dict(saved[role])
