"""Per-token KL estimators between the policy and the frozen reference.

Both take log-probabilities of the SAMPLED tokens (policy ``logp`` and reference
``ref_logp``, shaped ``[B, L]``) and return a per-token estimate of
KL(policy || reference), shaped ``[B, L]``; the loss code masks and aggregates them
like the policy-gradient term.

With x = ref_logp - logp (log of reference/policy ratio on a policy sample):
- ``k1``  -x                     unbiased, high variance, can be negative
- ``k2``  x^2 / 2                biased, low variance (kept for comparison)
- ``k3``  exp(x) - x - 1         unbiased, low variance, always >= 0 ("low_var_kl";
                                 SSP, SCORE and SCOPE use it)
(J. Schulman, "Approximating KL divergence", 2020.)

``KL_ESTIMATORS`` maps the config name to the estimator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["KL_ESTIMATORS", "get_kl", "kl_k1", "kl_k2", "kl_k3"]

# Clamp the log-ratio before exp() so a token the reference finds absurdly unlikely
# cannot produce inf (verl clamps the same way).
LOG_RATIO_CLAMP = 20.0


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = logp - ref_logp per token. [B, L] -> [B, L]"""
    return logp - ref_logp  # [B, L]


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = (logp - ref_logp)^2 / 2 per token. [B, L] -> [B, L]"""
    return 0.5 * (logp - ref_logp) ** 2  # [B, L]


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 per token (>= 0). [B, L] -> [B, L]"""
    x = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, L]
    return torch.exp(x) - x - 1.0  # [B, L]


KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

KL_ESTIMATORS: dict[str, KLFn] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def get_kl(name: str) -> KLFn:
    """Look a KL estimator up by its config name, with a helpful error."""
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown KL estimator {name!r}; choose one of {sorted(KL_ESTIMATORS)}") from None
