"""Policy-gradient loss pieces: token log-probs, entropy, PPO-clip, loss aggregation.

- ``token_logprobs(logits [B, L, V], ids [B, L]) -> [B, L]``: log p(id) computed as the
  gathered logit minus logsumexp over the vocabulary, in float32 (at least), chunked over positions
  so no full ``[B, L, V]`` log_softmax (or float32 copy of the logits) is materialised.
- ``entropy(logits [B, L, V]) -> [B, L]``: H = logsumexp(z) - sum_v softmax(z)_v z_v,
  chunked the same way.
- ``logprobs_and_entropy(logits [N, V], ids [N], temp [N])``: both from one expression, for
  ``torch.compile`` to fuse (``model.compile``).
- ``policy_loss(logp, old_logp, adv, mask, clip_low, clip_high, agg)``: token-level
  PPO-clip with separate lower/upper clip ranges (DAPO-style "clip higher"; SSP uses
  clip_high = 0.285)::

      ratio_t   = exp(logp_t - old_logp_t)
      loss_t    = -min(ratio_t * A, clip(ratio_t, 1 - clip_low, 1 + clip_high) * A)

  returns ``(loss, stats)`` with the clip fractions and ratio statistics.

Aggregations (``AGGREGATIONS``), chosen once by name:
- ``token_mean``: sum of loss_t over every unmasked token of the batch / number of those
  tokens (each token weighs the same, long answers weigh more; DAPO, verl default).
- ``seq_sum`` (Dr.GRPO, Liu et al. 2025, "Understanding R1-Zero-Like Training"):
  Dr.GRPO removes GRPO's 1/|o_i| per-sequence length normalisation, which biases the
  policy toward long wrong answers. Its reference code sums the per-token loss over each
  sequence and divides by a CONSTANT, the generation budget (max response length), then
  averages over the B sequences::

      loss = (1 / B) * sum_i (1 / L_max) * sum_t mask_it * loss_it

  The constant only rescales the gradient (like a learning-rate factor), so it must not
  depend on the batch: pass ``max_len`` (e.g. ``rollout.max_new_tokens``); without it the
  padded length L of the tensor is used.

With gradient accumulation the caller may pass ``denom`` to override the denominator
(e.g. the token count of the whole batch rather than of the micro-batch).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "AGGREGATIONS",
    "aggregate",
    "entropy",
    "logprobs_and_entropy",
    "masked_mean",
    "policy_loss",
    "seq_sum",
    "token_logprobs",
    "token_mean",
]

DEFAULT_CHUNK = 1024  # positions per chunk: 1024 x 150k vocab x 4 bytes ~ 600 MB peak
LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: finite ratios even for wildly off-policy tokens


def _compute_dtype(logits: torch.Tensor) -> torch.dtype:
    return torch.promote_types(logits.dtype, torch.float32)  # bf16/fp16 -> fp32, fp64 stays


def _flat_positions(logits: torch.Tensor) -> torch.Tensor:
    if logits.dim() < 2:
        raise ValueError(f"logits must be shaped [..., V], got shape {tuple(logits.shape)}")
    return logits.reshape(-1, logits.shape[-1])  # [N, V]


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """log softmax(logits)[ids] without a full log_softmax. [B, L, V], [B, L] -> [B, L]

    Computed in float32 at least (bf16 logits give float32 log-probs).
    """
    if logits.shape[:-1] != ids.shape:
        raise ValueError(
            f"ids shape {tuple(ids.shape)} must equal logits shape without the vocab dim "
            f"{tuple(logits.shape[:-1])}"
        )
    flat = _flat_positions(logits)  # [N, V]
    flat_ids = ids.reshape(-1, 1)  # [N, 1]
    dtype = _compute_dtype(logits)
    out = []
    for start in range(0, flat.shape[0], chunk_size):
        z = flat[start : start + chunk_size].to(dtype)  # [n, V]
        picked = z.gather(-1, flat_ids[start : start + chunk_size]).squeeze(-1)  # [n]
        out.append(picked - torch.logsumexp(z, dim=-1))  # [n]
    return torch.cat(out).reshape(ids.shape) if out else flat.new_zeros(ids.shape, dtype=dtype)


def entropy(logits: torch.Tensor, chunk_size: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Entropy of softmax(logits) per position, in nats. [B, L, V] -> [B, L] (>= float32)

    H = lse(z) - sum_v p_v z_v. Chunked over positions; call it under torch.no_grad()
    for metrics (with grad, autograd keeps each chunk's float32 copy for backward).
    -inf logits (masked vocabulary) count as probability 0.
    """
    flat = _flat_positions(logits)  # [N, V]
    dtype = _compute_dtype(logits)
    floor = torch.finfo(dtype).min  # -inf -> finite, so p * z = 0 * floor = 0, not nan
    out = []
    for start in range(0, flat.shape[0], chunk_size):
        z = flat[start : start + chunk_size].to(dtype).clamp_min(floor)  # [n, V]
        lse = torch.logsumexp(z, dim=-1, keepdim=True)  # [n, 1]
        p = torch.exp(z - lse)  # [n, V]
        out.append(lse.squeeze(-1) - (p * z).sum(dim=-1))  # [n]
    shape = logits.shape[:-1]
    return torch.cat(out).reshape(shape) if out else flat.new_zeros(shape, dtype=dtype)


def logprobs_and_entropy(
    logits: torch.Tensor, ids: torch.Tensor, temp: torch.Tensor, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The update's two per-token quantities from one pass over the logits.

    logits [N, V] (any float dtype, unscaled), ids [N], temp [N] -> (log p(ids) of softmax(logits / temp)
    [N], entropy of that softmax [N]), float32. ``entropy`` carries a gradient only with ``entropy_grad``.
    Unchunked: written to be fused by ``torch.compile`` (``model.compile``) into a few kernels that read
    the bf16 logits instead of ~a dozen float32 passes; eager callers use token_logprobs / entropy.
    """
    z = logits.float() / temp[:, None]  # [N, V]
    z = z.clamp_min(torch.finfo(z.dtype).min)  # -inf (masked vocabulary) -> finite: p * z = 0, not nan
    lse = torch.logsumexp(z, dim=-1)  # [N]
    logp = z.gather(-1, ids[:, None]).squeeze(-1) - lse  # [N]
    zh = z if entropy_grad else z.detach()
    lh = lse if entropy_grad else lse.detach()
    ent = lh - (torch.softmax(zh, dim=-1) * zh).sum(dim=-1)  # [N]
    return logp, ent


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over positions where mask is 1 (0 if the mask is empty). -> scalar"""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def token_mean(
    per_token: torch.Tensor, mask: torch.Tensor, max_len: int | None = None, denom: float | None = None
) -> torch.Tensor:
    """Sum over unmasked tokens / number of unmasked tokens. [B, L] -> scalar"""
    m = mask.to(per_token.dtype)  # [B, L]
    total = (per_token * m).sum()
    return total / (denom if denom is not None else m.sum().clamp_min(1.0))


def seq_sum(
    per_token: torch.Tensor, mask: torch.Tensor, max_len: int | None = None, denom: float | None = None
) -> torch.Tensor:
    """Dr.GRPO: per-sequence token sum / constant max_len, averaged over sequences.

    [B, L] -> scalar; equals total / (B * max_len), or total / denom when given.
    """
    m = mask.to(per_token.dtype)  # [B, L]
    total = (per_token * m).sum()
    if denom is None:
        length = max_len if max_len is not None else per_token.shape[-1]
        denom = per_token.shape[0] * length
    return total / denom


AggFn = Callable[..., torch.Tensor]

AGGREGATIONS: dict[str, AggFn] = {"token_mean": token_mean, "seq_sum": seq_sum}


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    agg: str = "token_mean",
    max_len: int | None = None,
    denom: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss [B, L] to a scalar with the named aggregation."""
    try:
        fn = AGGREGATIONS[agg]
    except KeyError:
        raise ValueError(f"unknown loss aggregation {agg!r}; choose one of {sorted(AGGREGATIONS)}") from None
    return fn(per_token, mask, max_len=max_len, denom=denom)


def per_token_advantage(adv: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[B] (one advantage per sequence) or [B, L] -> [B, L]-broadcastable."""
    adv = adv.to(like.dtype)
    if adv.dim() == 1:
        return adv.unsqueeze(-1)  # [B, 1]
    if adv.shape == like.shape:
        return adv  # [B, L]
    raise ValueError(f"adv must be shaped [B] or [B, L] = {tuple(like.shape)}, got {tuple(adv.shape)}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token_mean",
    max_len: int | None = None,
    denom: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level PPO-clip loss (to minimise) and statistics.

    logp, old_logp, mask: [B, L]; adv: [B] or [B, L]. mask is 1 on model-generated
    tokens, 0 on prompt padding and tool output.
    """
    if not (logp.shape == old_logp.shape == mask.shape):
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask "
            f"{tuple(mask.shape)} must have the same [B, L] shape"
        )
    a = per_token_advantage(adv, logp)  # [B, 1] or [B, L]
    old = old_logp.detach().to(logp.dtype)  # [B, L]
    log_ratio = (logp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, L]
    ratio = torch.exp(log_ratio)  # [B, L]
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # [B, L]
    surr = ratio * a  # [B, L]
    surr_clipped = clipped_ratio * a  # [B, L]
    per_token = -torch.minimum(surr, surr_clipped)  # [B, L]
    loss = aggregate(per_token, mask, agg, max_len=max_len, denom=denom)
    return loss, _clip_stats(ratio.detach(), a.detach().expand_as(ratio), mask, clip_low, clip_high)


def _clip_stats(ratio, a, mask, clip_low, clip_high) -> dict[str, float]:
    """Fractions of unmasked tokens where the clipped branch is active, ratio stats."""
    m = mask.bool()  # [B, L]
    n = int(m.sum())
    if n == 0:
        return {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0,
                "ratio_mean": 1.0, "ratio_min": 1.0, "ratio_max": 1.0, "n_tokens": 0}
    low = (ratio < 1.0 - clip_low) & (a < 0) & m  # pushed down past the floor
    high = (ratio > 1.0 + clip_high) & (a > 0) & m  # pushed up past the ceiling
    r = ratio[m]
    return {
        "clip_frac": float((low | high).sum()) / n,
        "clip_frac_low": float(low.sum()) / n,
        "clip_frac_high": float(high.sum()) / n,
        "ratio_mean": float(r.mean()),
        "ratio_min": float(r.min()),
        "ratio_max": float(r.max()),
        "n_tokens": n,
    }


def truncated_is_weights(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Per-token truncated importance weights min(pi_trainer / pi_rollout, cap).

    Both [B, L] log-probs of the sampled tokens (the trainer's before the update, vLLM's at
    sampling time). log ratio 0.5 -> e^0.5 = 1.65; log ratio 2 -> e^2 = 7.39, capped at 2.
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    return torch.exp(trainer_logp - rollout_logp).clamp(max=cap).detach()
