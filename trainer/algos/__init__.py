"""RL algorithm pieces as pure tensor functions, each chosen once through a registry.

- ``advantages``: GRPO, Dr.GRPO, REINFORCE, RLOO, group normalization, EMA baseline
  (``ADVANTAGES``).
- ``losses``: token log-probs, entropy, token-level PPO-clip, loss aggregation
  (``AGGREGATIONS``).
- ``kl``: per-token KL estimators k1/k2/k3 (``KL_ESTIMATORS``).
- ``distill``: pi-Play's top-K + tail self-distillation divergence (``DIVERGENCES``).
"""

from trainer.algos.advantages import (
    ADVANTAGES,
    EMABaseline,
    dr_grpo,
    ema_baseline,
    get_advantage,
    group_normalized,
    grpo,
    reinforce,
    rloo,
)
from trainer.algos.distill import DIVERGENCES, topk_tail_divergence
from trainer.algos.kl import KL_ESTIMATORS, get_kl, kl_k1, kl_k2, kl_k3
from trainer.algos.losses import (
    AGGREGATIONS,
    aggregate,
    entropy,
    masked_mean,
    policy_loss,
    token_logprobs,
)

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "DIVERGENCES",
    "EMABaseline",
    "KL_ESTIMATORS",
    "aggregate",
    "dr_grpo",
    "ema_baseline",
    "entropy",
    "get_advantage",
    "get_kl",
    "group_normalized",
    "grpo",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "policy_loss",
    "reinforce",
    "rloo",
    "token_logprobs",
    "topk_tail_divergence",
]
