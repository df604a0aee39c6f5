"""Sequence packing for the update pass: no pad token goes through the model.

RL batches are ragged (prompts and completions of every length). Padding them to the longest
row wastes the FLOPs of every pad position. Packing instead concatenates the sequences of a
micro-batch into ONE row of ``T = sum(lengths)`` tokens and tells attention where each sequence
starts, so every token attends only to earlier tokens of its own sequence:

- ``position_ids`` restart at 0 for every sequence (rotary embeddings see the same positions as
  an unpacked forward);
- ``cu_seqlens`` ([N+1], int32) are the cumulative boundaries, passed to attention as the
  ``cu_seq_lens_q/k`` keyword arguments that transformers forwards to its attention functions;
- attention is varlen: ``torch.nn.attention.varlen.varlen_attn`` (flash kernel, CUDA) when
  torch has it, else one causal SDPA call per sequence (exact, slower; CPU and old torch).
  Models already on ``flash_attention_2/3`` use their own varlen path with the same kwargs.

``enable_varlen_attention(model)`` registers the ``selfplay_varlen`` attention implementation
(it behaves exactly like ``sdpa`` when no ``cu_seq_lens_q`` is passed, so generation and padded
forwards are unchanged) and switches the model to it once, for good: gradient checkpointing
recomputes layers in backward and must find the same implementation then.

``plan_bins(lengths, max_tokens)`` groups sequences into micro-batches of at most
``max_tokens`` tokens (first-fit decreasing). ``completion_logprobs(model, prompts,
completions, temperature)`` returns, per sequence, ``log_softmax(logits / T)`` of each
completion token, computed on the packed row; the output head runs on chunks of positions
under activation checkpointing, so no [T, V] float32 logits tensor is ever kept.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

VARLEN_ATTN = "selfplay_varlen"
_NATIVE_VARLEN = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
_PACKED = contextvars.ContextVar("selfplay_packed_forward", default=False)


# -- planning -------------------------------------------------------------------------------
def plan_bins(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into bins of at most ``max_tokens`` tokens.

    First-fit decreasing: longest first, each into the first bin with room. A sequence longer
    than ``max_tokens`` gets a bin of its own (it is never cut). Bins keep their indices in
    ascending order. lengths [5, 3, 4, 2], max 7 -> [[0, 3], [1, 2]] (5+2, 4+3).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    bins: list[list[int]] = []
    room: list[int] = []
    for i in order:
        n = int(lengths[i])
        if n < 0:
            raise ValueError(f"sequence {i} has negative length {n}")
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(max_tokens - n)
    return [sorted(b) for b in bins]


@dataclass
class PackedBatch:
    """Several sequences as one row. ``lengths[k]`` tokens of sequence k start at ``cu[k]``."""

    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T], 0.. per sequence
    cu_seqlens: torch.Tensor  # [N + 1] int32, on the model's device
    lengths: list[int]
    max_len: int

    @property
    def n_tokens(self) -> int:
        return int(sum(self.lengths))

    def attention_kwargs(self) -> dict:
        """The keyword arguments transformers forwards to the attention function."""
        return {"cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                "max_length_q": self.max_len, "max_length_k": self.max_len}

    def split(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Cut a per-position tensor [T, ...] (or [1, T, ...]) back into one tensor per sequence."""
        if values.dim() > 1 and values.shape[0] == 1 and values.shape[1] == self.n_tokens:
            values = values[0]
        return list(torch.split(values, self.lengths, dim=0))


def pack(seqs: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> PackedBatch:
    """Concatenate token sequences into one packed row (no padding)."""
    if not seqs or any(len(s) == 0 for s in seqs):
        raise ValueError("pack needs at least one sequence and no empty sequence")
    lengths = [len(s) for s in seqs]
    ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long, device=device)[None]  # [1, T]
    pos = torch.cat([torch.arange(n, dtype=torch.long) for n in lengths]).to(device)[None]  # [1, T]
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), 0)
    return PackedBatch(input_ids=ids, position_ids=pos, cu_seqlens=cu.to(device), lengths=lengths,
                       max_len=max(lengths))


# -- attention ------------------------------------------------------------------------------
def _repeat_kv(x: torch.Tensor, n_rep: int, dim: int) -> torch.Tensor:
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=dim)


@torch.compiler.disable  # model.compile (trainer/compile.py): attention runs eagerly, between graphs
def _varlen_flash(q, k, v, cu, max_len: int, scale: float | None):
    """q [T, H, D], k/v [T, Hkv, D] -> [T, H, D] through torch's varlen flash kernel."""
    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    kwargs: dict = {}
    if "is_causal" in params:  # torch 2.10
        kwargs["is_causal"] = True
    else:  # torch >= 2.11: causal = window (-1, 0)
        kwargs["window_size"] = (-1, 0)
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        else:
            q = q * (scale * q.shape[-1] ** 0.5)  # the kernel divides by sqrt(D)
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            n_rep = q.shape[1] // k.shape[1]
            k, v = _repeat_kv(k, n_rep, 1), _repeat_kv(v, n_rep, 1)
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kwargs)


@torch.compiler.disable  # model.compile (trainer/compile.py): attention runs eagerly, between graphs
def _varlen_loop(q, k, v, cu, scale: float | None):
    """Exact fallback: one causal SDPA per sequence. q [1, H, T, D] -> [1, T, H, D]."""
    n_rep = q.shape[1] // k.shape[1]
    k, v = _repeat_kv(k, n_rep, 1), _repeat_kv(v, n_rep, 1)
    bounds = cu.tolist()
    outs = [F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], is_causal=True, scale=scale)
            for s, e in zip(bounds[:-1], bounds[1:])]
    return torch.cat(outs, dim=2).transpose(1, 2)  # [1, T, H, D]


def _use_flash(q: torch.Tensor) -> bool:
    if not q.is_cuda or q.dtype not in (torch.bfloat16, torch.float16):
        return False
    try:
        from torch.nn.attention import varlen  # noqa: F401
    except ImportError:
        return False
    return True


def _as_autocast(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q/k/v in autocast's lower precision, as autocast gives ``scaled_dot_product_attention``.

    With float32 weights under bf16 autocast (``model.dtype: auto`` on a GPU), the projections come out
    in bf16 but rotary embeddings (float32 cos/sin) turn q and k back into float32, so attention would
    see float32: the flash kernel refuses it and the exact per-sequence loop ran instead (a GRPO update
    of Qwen2.5-0.5B at ~5k tokens/s on an H100, 17 s a step)."""
    q = tensors[0]
    if q.dtype != torch.float32 or not torch.is_autocast_enabled(q.device.type):
        return tensors
    dtype = torch.get_autocast_dtype(q.device.type)
    return tuple(t.to(dtype) for t in tensors)


def varlen_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0,
                             scaling: float | None = None, **kwargs):
    """transformers attention function: varlen when ``cu_seq_lens_q`` is given, else sdpa.

    query [B, H, T, D], key/value [B, Hkv, T, D] -> (out [B, T, H, D], None).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
    if query.shape[2] != key.shape[2]:
        raise ValueError("packed attention does not take a KV cache (query and key lengths differ)")
    query, key, value = _as_autocast(query, key, value)
    if _use_flash(query):
        max_len = int(kwargs.get("max_length_q") or int((cu[1:] - cu[:-1]).max()))
        out = _varlen_flash(query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
                            cu, max_len, scaling)  # [T, H, D]
        return out[None], None
    return _varlen_loop(query, key, value, cu, scaling), None


def _varlen_mask(*args, **kwargs):
    """Mask function of ``selfplay_varlen``: none for packed rows (attention uses cu_seqlens),
    the sdpa mask otherwise."""
    from transformers.masking_utils import sdpa_mask

    if _PACKED.get():
        return None
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(VARLEN_ATTN, varlen_attention_forward)
    AttentionMaskInterface.register(VARLEN_ATTN, _varlen_mask)


def _config_of(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base, base.config


def _set_attn(base, name: str) -> None:
    """Switch a model (and, for a bare decoder, the config it shares) to attention ``name``."""
    if hasattr(base, "set_attn_implementation"):
        try:
            base.set_attn_implementation(name)
            return
        except (ValueError, AttributeError):  # older transformers: bare decoders refuse
            pass
    base.config._attn_implementation = name


def enable_varlen_attention(model) -> str:
    """Make ``model`` accept packed rows; returns the attention implementation now in use.

    sdpa/eager models switch to ``selfplay_varlen`` (same results as sdpa for ordinary calls);
    flash_attention_2/3/4 models already handle ``cu_seq_lens_q`` and stay as they are.
    """
    _register()
    base, config = _config_of(model)
    current = getattr(config, "_attn_implementation", None) or "sdpa"
    if current in _NATIVE_VARLEN or current == VARLEN_ATTN:
        return current
    _set_attn(base, VARLEN_ATTN)
    return VARLEN_ATTN


@contextlib.contextmanager
def _packed_forward():
    token = _PACKED.set(True)
    try:
        yield
    finally:
        _PACKED.reset(token)


# -- log-probabilities ----------------------------------------------------------------------
def _decoder_and_head(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None or getattr(base.config, "final_logit_softcapping", None):
        return None, None
    return decoder, head


def _chunk_logprobs(head, hidden, targets, temperature: float):
    logits = head(hidden).float()  # [n, V]
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [n]


def next_token_logprobs(model, batch: PackedBatch, temperature: float = 1.0, chunk: int = 4096) -> torch.Tensor:
    """log p(token t+1 | tokens <= t) at every position t of the packed row, [T].

    The last position of each sequence has no next token: its value is 0.
    """
    ids = batch.input_ids  # [1, T]
    targets = torch.roll(ids[0], -1)  # [T]  (wrong only at sequence ends, zeroed below)
    decoder, head = _decoder_and_head(model)
    with _packed_forward():
        if decoder is None:
            logits = model(input_ids=ids, position_ids=batch.position_ids, **batch.attention_kwargs()).logits[0]
            logits = logits.float() / temperature  # [T, V]
            out = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        else:
            hidden = decoder(input_ids=ids, position_ids=batch.position_ids, use_cache=False,
                             **batch.attention_kwargs()).last_hidden_state[0]  # [T, d]
            parts = []
            for s in range(0, hidden.shape[0], chunk):
                h, t = hidden[s:s + chunk], targets[s:s + chunk]
                if torch.is_grad_enabled() and h.requires_grad:
                    parts.append(torch.utils.checkpoint.checkpoint(
                        _chunk_logprobs, head, h, t, temperature, use_reentrant=False))
                else:
                    parts.append(_chunk_logprobs(head, h, t, temperature))
            out = torch.cat(parts)  # [T]
    ends = batch.cu_seqlens[1:].long() - 1  # [N]
    keep = torch.ones_like(out, dtype=torch.bool)
    keep[ends] = False
    return out * keep


def packed_trained_hidden(decoder, samples, mask: torch.Tensor) -> torch.Tensor:
    """The update pass's hook: hidden states [N, H] predicting each trained token, from ONE
    packed row (no padding). ``samples`` have ``prompt_ids``/``completion_ids``; ``mask``
    [B, C] marks trained completion tokens (right-padded). Same rows, same order as the padded
    path's ``h[mask]``.
    """
    enable_varlen_attention(decoder)
    device = mask.device
    batch = pack([list(s.prompt_ids) + list(s.completion_ids) for s in samples], device)
    with _packed_forward():
        h = decoder(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                    **batch.attention_kwargs()).last_hidden_state[0]  # [T, H]
    prompt_lens = torch.tensor([len(s.prompt_ids) for s in samples], device=device)  # [B]
    first = batch.cu_seqlens[:-1].long() + prompt_lens - 1  # [B] position predicting completion token 0
    idx = first[:, None] + torch.arange(mask.shape[1], device=device)[None, :]  # [B, C]
    return h[idx[mask]]  # [N, H]


def completion_logprobs(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                        temperature: float = 1.0, chunk: int = 4096) -> list[torch.Tensor]:
    """Per sequence, log p of each completion token given everything before it, packed.

    Returns ``[tensor [len(completion_k)] for k]``, the same numbers a padded forward gives.
    """
    if len(prompts) != len(completions):
        raise ValueError("completion_logprobs needs one completion per prompt")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    device = next(model.parameters()).device
    batch = pack([list(p) + list(c) for p, c in zip(prompts, completions)], device)
    per_pos = batch.split(next_token_logprobs(model, batch, temperature, chunk))
    # completion token j of sequence k sits at position P+j and is predicted at position P+j-1
    return [lp[len(p) - 1: len(p) - 1 + len(c)] for lp, p, c in zip(per_pos, prompts, completions)]
