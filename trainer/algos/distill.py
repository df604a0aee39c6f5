"""pi-Play self-distillation: top-K + tail divergence between student and teacher.

pi-Play (Appendix C, following SDPO, "Reinforcement learning via self-distillation")
distils a teacher that sees the question construction path into the student, per
generated token of the student's rollout. To avoid a full-vocabulary divergence it
keeps the STUDENT's top-K tokens exactly and collapses every other token into one tail
bucket, for both distributions:

    S  = top-K token ids of the student's distribution at this position
    p  = [p_s(v) for v in S] + [1 - sum_{v in S} p_s(v)]      (K + 1 buckets)
    q  = [p_t(v) for v in S] + [1 - sum_{v in S} p_t(v)]

and computes a divergence between these two (K+1)-bucket distributions:

- ``reverse_kl``  KL(p || q) = sum_b p_b (log p_b - log q_b)   (ours: default)
- ``forward_kl``  KL(q || p) = sum_b q_b (log q_b - log p_b)
- ``js``          0.5 KL(p || m) + 0.5 KL(q || m), m = (p + q) / 2

The teacher is detached (no gradient); gradients reach the student through its top-K
log-probs and its tail bucket. The tail log-mass is log(1 - exp(lse_topK)) computed
with expm1, with lse_topK clamped to <= -1e-7 so an (almost) empty tail stays finite,
as in the SDPO reference. With K = V both tails get the same clamped mass, their terms
cancel exactly, and the result is the full-vocabulary divergence.

Work is chunked over positions and done in float32 (or float64 for float64 input), so the memory beyond the inputs
is O(chunk x V) for the forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["DIVERGENCES", "topk_tail_divergence", "topk_tail_logprobs"]

TAIL_LSE_MAX = -1e-7  # keeps log(1 - exp(lse)) finite when the top-K hold all the mass
DEFAULT_CHUNK = 1024


def _add_tail(topk_logp: torch.Tensor) -> torch.Tensor:
    """Append log(1 - sum exp(topk_logp)) as bucket K+1. [n, K] -> [n, K+1]"""
    lse = torch.logsumexp(topk_logp, dim=-1, keepdim=True).clamp(max=TAIL_LSE_MAX)  # [n, 1]
    tail = torch.log(-torch.expm1(lse))  # [n, 1]
    return torch.cat([topk_logp, tail], dim=-1)  # [n, K+1]


def topk_tail_logprobs(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bucketed log-probs on the student's top-K + tail. [n, V] x2 -> ([n, K+1], [n, K+1])"""
    dtype = torch.promote_types(student_logits.dtype, torch.float32)  # bf16 -> fp32, fp64 stays
    s = student_logits.to(dtype)  # [n, V]
    t = teacher_logits.detach().to(dtype)  # [n, V]
    k = min(k, s.shape[-1])
    idx = s.detach().topk(k, dim=-1).indices  # [n, K] student's top-K ids
    s_logp = s.gather(-1, idx) - torch.logsumexp(s, dim=-1, keepdim=True)  # [n, K]
    t_logp = t.gather(-1, idx) - torch.logsumexp(t, dim=-1, keepdim=True)  # [n, K]
    return _add_tail(s_logp), _add_tail(t_logp)  # [n, K+1] each


def _kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dim. [n, K+1] -> [n]"""
    return (logp.exp() * (logp - logq)).sum(dim=-1)


def reverse_kl(s_logp: torch.Tensor, t_logp: torch.Tensor) -> torch.Tensor:
    """KL(student || teacher). [n, K+1] x2 -> [n]"""
    return _kl(s_logp, t_logp)


def forward_kl(s_logp: torch.Tensor, t_logp: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student). [n, K+1] x2 -> [n]"""
    return _kl(t_logp, s_logp)


def jensen_shannon(s_logp: torch.Tensor, t_logp: torch.Tensor) -> torch.Tensor:
    """0.5 KL(s || m) + 0.5 KL(t || m), m the mixture. [n, K+1] x2 -> [n]"""
    log_m = torch.logaddexp(s_logp, t_logp) - math.log(2.0)  # [n, K+1]
    return 0.5 * _kl(s_logp, log_m) + 0.5 * _kl(t_logp, log_m)


DivergenceFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

DIVERGENCES: dict[str, DivergenceFn] = {
    "reverse_kl": reverse_kl,
    "forward_kl": forward_kl,
    "js": jensen_shannon,
}


def topk_tail_divergence(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    k: int = 50,
    kind: str = "reverse_kl",
    mask: torch.Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """Per-token top-K + tail divergence. [B, L, V] x2 (+ mask [B, L]) -> [B, L]

    Computed in float32 at least (float64 inputs stay float64).

    Positions where ``mask`` is 0 (tool output, padding) are 0 in the result.
    """
    try:
        divergence = DIVERGENCES[kind]
    except KeyError:
        raise ValueError(f"unknown distillation divergence {kind!r}; choose one of {sorted(DIVERGENCES)}") from None
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} must be aligned on the same [B, L, V] positions"
        )
    if k < 1:
        raise ValueError(f"top-K must be at least 1, got k={k}")
    shape = student_logits.shape[:-1]  # [B, L]
    v = student_logits.shape[-1]
    s_flat = student_logits.reshape(-1, v)  # [N, V]
    t_flat = teacher_logits.reshape(-1, v)  # [N, V]
    out = []
    for start in range(0, s_flat.shape[0], chunk_size):
        s_logp, t_logp = topk_tail_logprobs(s_flat[start : start + chunk_size], t_flat[start : start + chunk_size], k)
        out.append(divergence(s_logp, t_logp))  # [n]
    per_token = torch.cat(out).reshape(shape) if out else s_flat.new_zeros(shape)  # [B, L]
    if mask is not None:
        per_token = per_token * mask.to(per_token.dtype)  # [B, L]
    return per_token
