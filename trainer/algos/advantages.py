"""Advantage estimators: turn scalar rewards into per-sample advantages.

Every estimator is a pure function of a reward tensor. The group estimators take
rewards shaped ``[N_groups, G]`` (G samples drawn for the same prompt, one row per
prompt) and return advantages of the same shape:

- ``grpo``      (r - mean_group) / (std_group + eps)        -- GRPO (DeepSeekMath)
- ``dr_grpo``   r - mean_group                               -- Dr.GRPO: no std division
- ``reinforce`` r                                            -- raw reward, no baseline
- ``rloo``      r_i - mean_{j != i} r_j                      -- leave-one-out baseline

``group_normalized(rewards [N], group_ids [N])`` does the same centring/scaling over
arbitrary groups (pi-Play hop groups, or one group for whole-batch normalization).
``EMABaseline`` is SCORE's evaluator baseline: A = R - b_{t-1}, then
b_t = 0.7 b_{t-1} + 0.3 R with b_0 = 0.

Choices: the standard deviation is the sample std (Bessel-corrected, as in TRL and
verl). A group of one sample carries no relative signal, so its advantage is 0 for
grpo, dr_grpo and rloo (instead of NaN).

``ADVANTAGES`` maps a config name to the ``[N_groups, G]`` estimator; recipes look the
estimator up once and call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = [
    "ADVANTAGES",
    "EMABaseline",
    "dr_grpo",
    "ema_baseline",
    "get_advantage",
    "group_normalized",
    "grpo",
    "reinforce",
    "rloo",
]

DEFAULT_EPS = 1e-6


def _as_groups(rewards: torch.Tensor | Sequence) -> torch.Tensor:
    """Rewards as a float tensor ``[N_groups, G]``; a 1-D input is one group."""
    r = torch.as_tensor(rewards, dtype=torch.float32) if not torch.is_tensor(rewards) else rewards.float()
    if r.dim() == 1:
        r = r.unsqueeze(0)  # [1, G]
    if r.dim() != 2:
        raise ValueError(
            f"rewards must be shaped [N_groups, G] (one row per prompt), got shape {tuple(r.shape)}"
        )
    return r


def _group_std(r: torch.Tensor) -> torch.Tensor:
    """Sample std over the last dim, 0 for groups of one. [N, G] -> [N, 1]"""
    if r.shape[-1] < 2:
        return torch.zeros_like(r[..., :1])
    return r.std(dim=-1, keepdim=True)  # Bessel-corrected


def _safe_div(centred: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """centred / scale, with 0 where scale is 0 (constant groups, eps = 0)."""
    return torch.where(scale > 0, centred / scale.clamp_min(torch.finfo(scale.dtype).tiny), torch.zeros_like(centred))


def grpo(rewards: torch.Tensor | Sequence, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """GRPO: (r - group mean) / (group std + eps). [N, G] -> [N, G]"""
    r = _as_groups(rewards)  # [N, G]
    mean = r.mean(dim=-1, keepdim=True)  # [N, 1]
    return _safe_div(r - mean, _group_std(r) + eps)  # [N, G]


def dr_grpo(rewards: torch.Tensor | Sequence) -> torch.Tensor:
    """Dr.GRPO: r - group mean, no std division. [N, G] -> [N, G]"""
    r = _as_groups(rewards)  # [N, G]
    return r - r.mean(dim=-1, keepdim=True)  # [N, G]


def reinforce(rewards: torch.Tensor | Sequence) -> torch.Tensor:
    """REINFORCE without baseline: the advantage is the raw reward. [N, G] -> [N, G]"""
    return _as_groups(rewards).clone()  # [N, G]


def rloo(rewards: torch.Tensor | Sequence) -> torch.Tensor:
    """RLOO: r_i minus the mean of the other G-1 rewards of its group. [N, G] -> [N, G]

    r_i - (sum - r_i)/(G-1) = G/(G-1) * (r_i - mean); a group of one gets 0.
    """
    r = _as_groups(rewards)  # [N, G]
    g = r.shape[-1]
    if g < 2:
        return torch.zeros_like(r)
    loo_mean = (r.sum(dim=-1, keepdim=True) - r) / (g - 1)  # [N, G]
    return r - loo_mean


def group_normalized(
    rewards: torch.Tensor | Sequence,
    group_ids: torch.Tensor | Sequence,
    scale: bool = True,
    eps: float = DEFAULT_EPS,
) -> torch.Tensor:
    """Centre (and with ``scale`` divide by the std) within arbitrary groups. [N] -> [N]

    ``group_ids`` may be any integers (e.g. pi-Play hop counts 1..4); samples sharing an
    id form a group. All ids equal = batch normalization. Groups of one get 0.
    """
    r = torch.as_tensor(rewards, dtype=torch.float32).flatten()  # [N]
    ids = torch.as_tensor(group_ids, device=r.device).flatten()  # [N]
    if r.shape != ids.shape:
        raise ValueError(
            f"rewards and group_ids must have the same length, got {r.numel()} and {ids.numel()}"
        )
    if r.numel() == 0:
        return r
    _, inverse = torch.unique(ids, return_inverse=True)  # [N] -> dense group index
    n_groups = int(inverse.max()) + 1
    zeros = torch.zeros(n_groups, device=r.device)  # [K]
    count = zeros.index_add(0, inverse, torch.ones_like(r))  # [K]
    mean = zeros.index_add(0, inverse, r) / count  # [K]
    centred = r - mean[inverse]  # [N]
    if not scale:
        return centred
    sq = zeros.index_add(0, inverse, centred**2)  # [K]
    var = sq / (count - 1).clamp_min(1)  # Bessel-corrected; 0 for groups of one
    return _safe_div(centred, var.sqrt()[inverse] + eps)  # [N]


def ema_baseline(baseline: float, reward: float, decay: float = 0.7) -> float:
    """One EMA step: b_t = decay * b_{t-1} + (1 - decay) * R (SCORE: decay 0.7)."""
    return decay * baseline + (1.0 - decay) * reward


class EMABaseline:
    """SCORE's evaluator baseline. ``advantage(R)`` returns R - b_{t-1}, then updates b.

    b_0 = 0 by default, so the first advantage is R itself.
    """

    def __init__(self, decay: float = 0.7, value: float = 0.0):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA decay must lie in [0, 1], got {decay}")
        self.decay = decay
        self.value = value

    def advantage(self, reward: float) -> float:
        adv = reward - self.value
        self.value = ema_baseline(self.value, reward, self.decay)
        return adv

    def state_dict(self) -> dict:
        return {"decay": self.decay, "value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.decay = float(state["decay"])
        self.value = float(state["value"])


AdvantageFn = Callable[[torch.Tensor], torch.Tensor]

ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "reinforce": reinforce,
    "rloo": rloo,
}


def get_advantage(name: str) -> AdvantageFn:
    """Look an estimator up by its config name, with a helpful error."""
    try:
        return ADVANTAGES[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; choose one of {sorted(ADVANTAGES)}"
        ) from None
