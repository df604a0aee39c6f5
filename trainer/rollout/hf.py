"""``HFGenerator``: the transformers backend of the ``Generator`` protocol.

It runs its own decode loop instead of ``model.generate()`` (benchmarks/generate.py measures
both on SmolLM2-135M; ours is faster):

- identical prompts (a GRPO group repeats each prompt G times) are prefilled once and their
  KV cache rows are copied, so prefill costs one pass per *unique* prompt;
- prefill computes logits for the last position only, in token-bounded micro-batches;
- the KV cache is preallocated and grows by doubling (no per-step ``torch.cat`` of the
  whole cache);
- sampling happens in the loop (exponential race == categorical sampling), stop strings
  are checked on the decoded tail of each sequence only, finished rows are dropped from the
  batch once enough of them are done, and the loop exits when every row has stopped.

Logprobs are ``log_softmax(logits / T)`` of the sampled token (see trainer/rollout/types.py).

Memory: a call's KV cache grows with its rows (a SPICE Reasoner call of 147 tasks x 8 answers is
1,176 rows; at 1,280 positions a Qwen2.5-1.5B cache is 28 layers x 2 KV heads x 128 dims x (K, V) x
2 bytes = 28 KiB a position, 36 MiB a row, 43 GB in all). The rows are therefore decoded in chunks
whose cache fits ``kv_budget_bytes`` (default on a GPU: ``KV_BUDGET_FRACTION`` of the memory free at
call time; no limit on the CPU), one chunk after another, rows of the same prompt in the same chunk
where the group fits (``plan_row_chunks``); the results come back in the prompts' order, the tokens
of one call (greedy) and each row's own log-probs. ``last_stats`` reports ``chunks``, ``chunk_rows``,
``kv_bytes_per_row`` and ``kv_budget_bytes``.

``cuda_graphs`` (config ``rollout.cuda_graphs``) swaps the decode step for a static-cache step
replayed as a CUDA graph (trainer/rollout/static_decode.py): same prefill, same sampling and
bookkeeping, one graph launch per token instead of hundreds of kernel launches. Any failure
to set it up falls back to the eager loop with one warning.
"""
from __future__ import annotations

import inspect
import logging
import time
from contextlib import contextmanager, nullcontext

import torch
from transformers.cache_utils import Cache, DynamicLayer

from trainer.rollout.static_decode import (AUTO_MODEL_TYPES, WARMUP_STEPS, StaticDecoder, StaticStepper,
                                           batch_bucket, capacity_bucket, model_type,
                                           repair_rng_after_failed_capture, unsupported_reason)
from trainer.rollout.types import Completion, SamplingParams

log = logging.getLogger(__name__)
_MIN_GRAPH_STEPS = 16  # calls generating fewer tokens per row decode eagerly
# share of the GPU memory free at call time (the driver's free memory plus what torch's allocator holds
# unused) that one chunk's KV cache and sampler buffers may take: the rest is headroom for prefill
# activations, the decode step's temporaries and fragmentation
KV_BUDGET_FRACTION = 0.6
_SAMPLER_COPIES = 4  # float32 [rows, V] buffers the sampler holds at once (logits, scaled, weights/cdf, top-p)


def kv_bytes_per_position(config, kv_dtype: torch.dtype) -> int:
    """Bytes of K and V one cache position takes over every layer of a model with this (transformers)
    config: 2 x layers x KV heads x head dim x the KV dtype's size.
    Qwen2.5-1.5B in bf16: 2 x 28 x 2 x 128 x 2 = 28,672."""
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * heads * head_dim * torch.empty((), dtype=kv_dtype).element_size()


def rows_per_chunk(budget_bytes: int | None, row_bytes: int, rows: int, bucketed: bool) -> int:
    """How many rows one chunk decodes: all ``rows`` when they fit ``budget_bytes`` (None = no limit),
    else the most whose memory (``row_bytes`` each) fits, at least 1. ``bucketed`` (the static step,
    whose storage has ``batch_bucket(n)`` rows): the largest batch bucket that fits."""
    if budget_bytes is None or rows * row_bytes <= budget_bytes and (not bucketed or
                                                                      batch_bucket(rows) * row_bytes <= budget_bytes):
        return rows
    most = max(1, budget_bytes // max(row_bytes, 1))
    if bucketed:
        b = 1
        while batch_bucket(b + 1) <= most:
            b = batch_bucket(b + 1)
        most = b
    return max(1, min(most, rows))


def plan_row_chunks(keys: list, size: int) -> list[list[int]]:
    """Row indices in chunks of at most ``size``: rows with the same key (prompt) go into one chunk
    when the group fits one (a group that does not fill a chunk is never split across two); each
    chunk lists its rows in their original order. One chunk (all rows, in order) when they fit."""
    if len(keys) <= size:
        return [list(range(len(keys)))]
    groups: dict = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    chunks, cur = [], []
    for rows in groups.values():
        if cur and len(cur) + len(rows) > size and len(rows) <= size:
            chunks.append(cur)
            cur = []
        for i in rows:
            if len(cur) == size:
                chunks.append(cur)
                cur = []
            cur.append(i)
    if cur:
        chunks.append(cur)
    return [sorted(c) for c in chunks]


class _GrowingLayer(DynamicLayer):
    """A KV cache layer backed by a preallocated buffer that doubles when full.

    ``keys``/``values`` are views of the filled part, so attention only sees real positions
    and no step copies the whole cache.
    """

    def __init__(self, initial_capacity: int):
        super().__init__()
        self.capacity = max(int(initial_capacity), 1)
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        cap = max(self.capacity, key_states.shape[-2])
        self.device = key_states.device
        self._kbuf = key_states.new_empty(b, h, cap, d)  # [B, H, cap, D]
        self._vbuf = value_states.new_empty(b, h, cap, value_states.shape[-1])
        self.capacity = cap
        self.is_initialized = True

    def _grow(self, needed: int) -> None:
        cap = self.capacity
        while cap < needed:
            cap *= 2
        for name in ("_kbuf", "_vbuf"):
            old = getattr(self, name)
            new = old.new_empty(old.shape[0], old.shape[1], cap, old.shape[3])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, new)
        self.capacity = cap

    def _refresh_views(self) -> None:
        self.keys = self._kbuf[:, :, : self.length]
        self.values = self._vbuf[:, :, : self.length]

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.length + n > self.capacity:
            self._grow(self.length + n)
        self._kbuf[:, :, self.length : self.length + n] = key_states
        self._vbuf[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._refresh_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Select / repeat batch rows (copies only the filled positions)."""
        if self.is_initialized:
            for name in ("_kbuf", "_vbuf"):
                old = getattr(self, name)
                new = old.new_empty(len(beam_idx), old.shape[1], self.capacity, old.shape[3])
                torch.index_select(old[:, :, : self.length], 0, beam_idx, out=new[:, :, : self.length])
                setattr(self, name, new)
            self._refresh_views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.reorder_cache(torch.as_tensor(indices, device=self.device))


def _new_cache(n_layers: int, capacity: int) -> Cache:
    return Cache(layers=[_GrowingLayer(capacity) for _ in range(n_layers)])


def _concat_caches(caches: list[Cache], capacity: int) -> Cache:
    """One cache whose rows are the rows of ``caches`` (same padded length), in order."""
    if len(caches) == 1:
        return caches[0]
    out = _new_cache(len(caches[0].layers), capacity)
    for i, layer in enumerate(out.layers):
        keys = torch.cat([c.layers[i].keys for c in caches], dim=0)
        values = torch.cat([c.layers[i].values for c in caches], dim=0)
        layer.update(keys, values)
    return out


@contextmanager
def adapter_disabled(model, use_adapter: bool):
    """Run ``model`` with its LoRA adapter switched off when ``use_adapter`` is False."""
    if use_adapter:
        yield
        return
    if callable(getattr(model, "disable_adapter", None)) and hasattr(model, "peft_config"):
        with model.disable_adapter():  # peft.PeftModel
            yield
        return
    if getattr(model, "_hf_peft_config_loaded", False):  # adapters loaded through transformers
        model.disable_adapters()
        try:
            yield
        finally:
            model.enable_adapters()
        return
    raise ValueError(
        "use_adapter=False needs a model with a LoRA adapter (peft) so that the frozen base is "
        "the adapter-free model. For a full fine-tune, build a second HFGenerator on the frozen "
        "copy of the weights and call it with use_adapter=True."
    )


def adapter_key(model, use_adapter: bool):
    """What a captured decode step depends on beyond its shapes: the adapters switched off (False),
    or which adapter runs (its name; separate policies switch it per role), or True (no peft)."""
    if not use_adapter:
        return False
    active = getattr(model, "active_adapter", None) if hasattr(model, "peft_config") else None
    return active if isinstance(active, str) else (tuple(active) if active else True)


@contextmanager
def _eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def cache_argument(model) -> str:
    """The forward() keyword for the KV cache: ``cache`` in recent transformers,
    ``past_key_values`` before (a peft wrapper passes keywords through to its base model)."""
    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def eos_ids_of(model, tokenizer) -> list[int]:
    """Every token id that ends a sequence: the tokenizer's EOS plus the generation config's."""
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif extra:
        ids.update(int(i) for i in extra)
    if not ids:
        raise ValueError("the tokenizer has no eos_token_id; set tokenizer.eos_token before generating")
    return sorted(ids)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of tokens whose probability reaches ``top_p``; others -> -inf."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # [B, V]
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
    drop_sorted = before >= top_p  # the top token is always kept
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    banned: list[int] | torch.Tensor | None,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row. Returns (tokens [B], logprobs [B]).

    The logprob is ``log_softmax(logits / T)[token]`` (T = 1 for greedy), computed before
    ``banned`` tokens are masked and before top-p truncation. Sampling inverts the CDF of the
    unnormalized probabilities with one uniform number per row (what ``torch.multinomial``
    does), so a step costs a few passes over the vocabulary. ``banned`` may be a device tensor
    of token ids (the decode loop builds it once: a list is copied to the device every call,
    which waits for the GPU).
    """
    logits = logits.float()  # [B, V]
    if banned is not None and not isinstance(banned, torch.Tensor):
        banned = torch.tensor(banned, device=logits.device, dtype=torch.long) if len(banned) else None
    t = temperature if temperature > 0 else 1.0
    scaled = logits / t if t != 1.0 else logits  # [B, V]
    peak = scaled.amax(dim=-1, keepdim=True)  # [B, 1]
    weights = (scaled - peak).exp_()  # [B, V], unnormalized probabilities
    log_z = weights.sum(dim=-1).log_() + peak.squeeze(1)  # [B]
    if temperature == 0:
        pick_from = scaled.index_fill(1, banned, float("-inf")) if banned is not None else scaled
        tokens = pick_from.argmax(dim=-1)  # [B]
    else:
        if top_p < 1.0:
            filtered = scaled.index_fill(1, banned, float("-inf")) if banned is not None else scaled
            weights = (top_p_filter(filtered, top_p) - peak).exp_()  # [B, V]
        elif banned is not None:
            weights.index_fill_(1, banned, 0.0)
        cdf = weights.cumsum_(dim=-1)  # [B, V], in place: weights are not needed again
        # u in (0, total]: the first index with cdf >= u always has positive mass
        u = (1.0 - torch.rand(cdf.shape[0], 1, device=cdf.device, generator=generator)) * cdf[:, -1:]  # [B, 1]
        tokens = torch.searchsorted(cdf, u).squeeze(1).clamp_(max=cdf.shape[1] - 1)  # [B]
    logprobs = scaled.gather(1, tokens[:, None]).squeeze(1) - log_z  # [B]
    return tokens, logprobs


class _StopChecker:
    """Does a sequence's decoded text newly contain a stop string after its last token?"""

    def __init__(self, tokenizer, stops: list[str]):
        self.tokenizer = tokenizer
        self.stops = list(stops)
        self.window = max((len(s) for s in stops), default=0) + 8

    def hit(self, ids: list[int]) -> str | None:
        if not self.stops:
            return None
        tail = ids[-self.window :]
        new = self.tokenizer.decode(tail, skip_special_tokens=True)
        candidates = [s for s in self.stops if s in new]
        if not candidates:
            return None
        old = self.tokenizer.decode(tail[:-1], skip_special_tokens=True)
        for s in candidates:
            if s not in old:
                return s
        return None


class HFGenerator:
    """Batched sampling from a transformers causal LM (optionally a peft model).

    ``prefill_tokens`` bounds how many prompt tokens go through one prefill forward;
    ``compact_ratio``: finished rows are dropped from the batch once at most this fraction
    of the current rows is still running. ``seed`` gives the sampler its own RNG (otherwise
    the global torch RNG is used, which checkpoints capture). ``autocast_dtype`` runs the
    forward passes under ``torch.autocast`` (bf16 on GPU with float32 weights), the way the
    trainer computes its logprobs; ``from_policy`` takes it from the policy.
    ``cuda_graphs``: True / False / "auto" (= on when the model is on CUDA and its architecture
    is supported) replays each decode step as a CUDA graph over a static KV cache.
    ``static_cache=True`` runs that same static-cache step eagerly (any device; what the CPU
    tests compare with the eager loop).
    ``kv_budget_bytes``: the most memory one chunk of rows may take for its KV cache and sampler
    buffers (None = on a GPU ``KV_BUDGET_FRACTION`` of the memory free at call time, on the CPU no
    limit); a call whose rows need more decodes them in chunks (see the module docstring).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        seed: int | None = None,
        prefill_tokens: int = 16384,
        compact_ratio: float = 0.75,
        autocast_dtype: torch.dtype | None = None,
        cuda_graphs: bool | str = False,
        static_cache: bool = False,
        kv_budget_bytes: int | None = None,
    ):
        if cuda_graphs not in (True, False, "auto"):
            raise ValueError(f"cuda_graphs must be true, false or \"auto\", got {cuda_graphs!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids_of(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.prefill_tokens = prefill_tokens
        self.compact_ratio = compact_ratio
        self.rng: torch.Generator | None = None
        if seed is not None:
            self.rng = torch.Generator(device=self._device()).manual_seed(seed)
        self.last_stats: dict = {}
        self._cache_kw = cache_argument(model)
        self.autocast_dtype = autocast_dtype
        self.cuda_graphs = cuda_graphs
        self.static_cache = bool(static_cache)
        if kv_budget_bytes is not None and int(kv_budget_bytes) <= 0:
            raise ValueError(f"kv_budget_bytes must be a positive number of bytes (or None), got {kv_budget_bytes!r}")
        self.kv_budget_bytes = None if kv_budget_bytes is None else int(kv_budget_bytes)
        self._static: StaticDecoder | None = None
        self._static_off: str | None = None  # why the static path was switched off, once
        self._static_overlap: bool | None = None  # tests: overlap the static steps without graphs too
        self._pack_gqa = True  # benchmarks: False measures the static step with transformers' sdpa

    @classmethod
    def from_policy(cls, policy, **kw) -> "HFGenerator":
        """A generator over a ``trainer.models.Policy`` (its model, tokenizer and autocast)."""
        return cls(policy.model, policy.tokenizer, autocast_dtype=getattr(policy, "autocast_dtype", None), **kw)

    def _autocast(self):
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(self._device().type, dtype=self.autocast_dtype)

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _n_layers(self) -> int:
        cfg = self.model.config.get_text_config(decoder=True)
        return cfg.num_hidden_layers

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        use_adapter: bool = True,
        *,
        max_new_tokens: list[int] | None = None,
    ) -> list[Completion]:
        """One completion per prompt. ``max_new_tokens`` (optional) caps each row separately,
        below ``params.max_new_tokens``."""
        if not prompts:
            return []
        _check_prompts(prompts, self.model.config.get_text_config(decoder=True).vocab_size)
        limits = [params.max_new_tokens] * len(prompts)
        if max_new_tokens is not None:
            if len(max_new_tokens) != len(prompts):
                raise ValueError("max_new_tokens must have one entry per prompt")
            limits = [max(0, min(int(m), params.max_new_tokens)) for m in max_new_tokens]
        with torch.inference_mode(), _eval_mode(self.model), adapter_disabled(self.model, use_adapter), \
                self._autocast():
            ids, lps, reasons, stops = self._decode(prompts, params, limits, use_adapter)
        t = params.logprob_temperature
        return [
            Completion(
                prompt_ids=list(p),
                completion_ids=ids[i],
                logprobs=lps[i],
                text=self.tokenizer.decode(ids[i], skip_special_tokens=True),
                finish_reason=reasons[i],
                stop=stops[i],
                temperature=t,
            )
            for i, p in enumerate(prompts)
        ]

    # -- the decode loop -------------------------------------------------------------------
    def _prefill(self, unique: list[tuple[int, ...]], capacity: int):
        """Left-padded prefill of the unique prompts. Returns (cache, last logits [U, V],
        attention mask [U, P], next positions [U])."""
        device = self._device()
        width = max(len(p) for p in unique)
        ids = torch.full((len(unique), width), self.pad_id, dtype=torch.long)  # [U, P]
        mask = torch.zeros((len(unique), width), dtype=torch.long)  # [U, P]
        for i, p in enumerate(unique):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, P]
        rows_per_chunk = max(1, self.prefill_tokens // width)
        caches, logits = [], []
        for s in range(0, len(unique), rows_per_chunk):
            cache = _new_cache(self._n_layers(), capacity)
            out = self.model(
                input_ids=ids[s : s + rows_per_chunk],
                attention_mask=mask[s : s + rows_per_chunk],
                position_ids=positions[s : s + rows_per_chunk],
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_kw: cache},
            )
            caches.append(cache)  # filled in place
            logits.append(out.logits[:, -1, :])
        cache = _concat_caches(caches, capacity)
        return cache, torch.cat(logits, dim=0), mask, positions[:, -1] + 1

    def _decode_mode(self) -> str:
        """"cuda_graph", "static" or "eager" for this call (see ``cuda_graphs``)."""
        if self._static_off is not None:
            return "eager"
        on_cuda = self._device().type == "cuda"
        graphs = self.cuda_graphs is True or (self.cuda_graphs == "auto" and on_cuda)
        if not graphs and not self.static_cache:
            return "eager"
        reason = unsupported_reason(self.model)
        if reason is None and self.cuda_graphs == "auto" and model_type(self.model) not in AUTO_MODEL_TYPES:
            reason = f"model type {model_type(self.model)!r} is not among those tested (set cuda_graphs: true to try it)"
        if graphs and not on_cuda:
            reason = reason or f"the model is on {self._device().type}, CUDA graphs need a GPU"
        if reason is not None:
            if self.cuda_graphs is True or self.static_cache:  # asked for explicitly: say why not
                self._switch_off(f"not supported for this model: {reason}")
            else:
                self._static_off = reason
            return "eager"
        return "cuda_graph" if graphs else "static"

    def _switch_off(self, why: str, exc_info: bool = False) -> None:
        self._static_off = why
        self._static = None
        log.warning("HFGenerator: static-cache/CUDA-graph decoding is off (%s); using the eager decode loop", why,
                    exc_info=exc_info)

    def _budget(self) -> int | None:
        """This call's memory budget for one chunk (see ``kv_budget_bytes``)."""
        if self.kv_budget_bytes is not None:
            return self.kv_budget_bytes
        device = self._device()
        if device.type != "cuda":
            return None
        free, _total = torch.cuda.mem_get_info(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return max(1, int(KV_BUDGET_FRACTION * (free + max(unused, 0))))

    def _row_bytes(self, prompts, limits: list[int], mode: str) -> int:
        """Memory one row takes while decoding: its KV cache (the static storage's capacity plus the
        prefill cache it is copied from; the eager cache doubles as it grows, so up to twice the
        positions, and copies itself when rows are dropped) and the sampler's float32 logits."""
        width = max(len(p) for p in prompts)
        steps = max(limits)
        if mode == "eager":
            positions = 2 * (width + steps)
        else:  # every chunk's storage has the whole call's capacity (``_decode``)
            positions = capacity_bucket(width + steps + WARMUP_STEPS) + width
        # under autocast the K/V projections (and the static storage) are in the autocast dtype
        kv_dtype = self.autocast_dtype or next(self.model.parameters()).dtype
        config = self.model.config.get_text_config(decoder=True)
        per_position = kv_bytes_per_position(config, kv_dtype)
        vocab = config.vocab_size
        return positions * per_position + _SAMPLER_COPIES * 4 * vocab

    def _decode(self, prompts, params: SamplingParams, limits: list[int], use_adapter: bool = True):
        mode = self._decode_mode()
        if mode == "cuda_graph" and max(limits) < _MIN_GRAPH_STEPS:
            mode = "eager"  # a capture costs a few eager steps: short calls do not earn it back
        n = len(prompts)
        budget = self._budget()
        row_bytes = self._row_bytes(prompts, limits, mode)
        capacity = max(len(p) for p in prompts) + max(limits) + WARMUP_STEPS  # the static cache's, for every chunk
        size = rows_per_chunk(budget, row_bytes, n, bucketed=mode != "eager")
        chunks = plan_row_chunks([tuple(p) for p in prompts], size)
        ids: list = [None] * n
        lps: list = [None] * n
        reasons: list = [None] * n
        stops: list = [None] * n
        parts = []
        try:
            for rows in chunks:
                if self._static_off is not None:
                    mode = "eager"  # an earlier chunk's static step failed
                sub = self._decode_chunk([prompts[r] for r in rows], params, [limits[r] for r in rows], mode,
                                         use_adapter, capacity if len(chunks) > 1 else 0)
                for j, r in enumerate(rows):
                    ids[r], lps[r], reasons[r], stops[r] = sub[0][j], sub[1][j], sub[2][j], sub[3][j]
                parts.append(self.last_stats)
        finally:
            if self._static is not None:
                self._static.end_call()
        self.last_stats = _merge_stats(parts)
        self.last_stats.update(chunks=len(chunks), chunk_rows=max(len(c) for c in chunks), kv_bytes_per_row=row_bytes,
                               kv_budget_bytes=budget)
        log.info("HFGenerator: %s", " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in self.last_stats.items()))
        return ids, lps, reasons, stops

    def _decode_chunk(self, prompts, params: SamplingParams, limits: list[int], mode: str, use_adapter: bool,
                      min_capacity: int = 0):
        """One chunk of rows in ``mode``; a failure of the static step switches it off and decodes eagerly.
        ``min_capacity``: the static cache's positions at least (the whole call's, so that its chunks
        reuse one storage instead of keeping one of each capacity)."""
        if mode != "eager":
            device = self._device()
            try:
                with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
                    return self._decode_with(prompts, params, limits, mode, use_adapter, min_capacity)
            except Exception as exc:  # noqa: BLE001 - any failure: never crash a run, decode eagerly
                self._switch_off(f"{type(exc).__name__}: {exc}", exc_info=True)
                if device.type == "cuda" and not repair_rng_after_failed_capture(device) and self.rng is None:
                    # a generator of our own is never part of a capture: sampling goes on with it
                    seed = int(torch.randint(0, 2**62, (1,)).item())
                    self.rng = torch.Generator(device=device).manual_seed(seed)
        return self._decode_with(prompts, params, limits, "eager", use_adapter)

    def _stepper(self, mode: str, cache, logits, mask, next_pos, expand, n_todo, max_steps, use_adapter,
                 min_capacity: int = 0):
        """The object that turns sampled tokens into the next logits, for ``mode``."""
        device = self._device()
        if mode == "eager":
            if n_todo != len(logits) or not torch.equal(expand, torch.arange(n_todo, device=device)):
                cache.reorder_cache(expand)
                logits, mask, next_pos = logits[expand], mask[expand], next_pos[expand]
            return _EagerStepper(self, cache, mask, next_pos), logits
        if self._static is None:
            self._static = StaticDecoder(self.model, self._cache_kw, use_graphs=mode == "cuda_graph",
                                         autocast_dtype=self.autocast_dtype)
        self._static.use_graphs = mode == "cuda_graph"
        self._static.overlap = self._static_overlap
        self._static.pack_gqa = self._static.pack_gqa and self._pack_gqa
        stepper = StaticStepper(self._static, cache, mask, next_pos, expand, max_steps,
                                adapter_key(self.model, use_adapter), min_capacity)
        return stepper, logits.index_select(0, expand)

    def _decode_with(self, prompts, params: SamplingParams, limits: list[int], mode: str, use_adapter: bool,
                     min_capacity: int = 0):
        n = len(prompts)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lps: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        stops: list[str | None] = [None] * n
        for r in range(n):
            if limits[r] == 0:
                reasons[r] = "length"
        todo = [r for r in range(n) if reasons[r] is None]
        self.last_stats = {"rows": n, "prefill_rows": 0, "steps": 0, "compactions": 0, "decode": mode}
        if not todo:
            return out_ids, out_lps, reasons, stops

        keys = [tuple(prompts[r]) for r in todo]
        unique = list(dict.fromkeys(keys))
        index = {k: i for i, k in enumerate(unique)}
        device = self._device()
        expand = torch.tensor([index[k] for k in keys], device=device)  # [B]
        max_steps = max(limits[r] for r in todo)
        width = max(len(k) for k in unique)
        capacity = width + min(max_steps, 64) if mode == "eager" else width
        t0 = time.perf_counter()
        cache, logits, mask, next_pos = self._prefill(unique, capacity)
        self.last_stats["prefill_rows"] = len(unique)
        self.last_stats["prefill_width"] = width
        captured_before = self._static.captures if self._static is not None else 0
        capture_seconds_before = self._static.capture_seconds if self._static is not None else 0.0
        stepper, logits = self._stepper(mode, cache, logits, mask, next_pos, expand, len(todo), max_steps,
                                        use_adapter, min_capacity)

        rows = list(todo)  # batch position -> original prompt index
        checker = _StopChecker(self.tokenizer, params.stop)
        eos = set(self.eos_ids)
        eos_t = torch.tensor(self.eos_ids, device=device)
        # the graph stepper runs the next step before the host reads this one's tokens
        overlap = getattr(stepper, "overlap", False)
        for step in range(max_steps):
            banned = eos_t if step < params.min_new_tokens else None
            tokens, lps = sample_tokens(logits, params.temperature, params.top_p, banned, self.rng)
            next_logits = None
            if overlap:
                pending = stepper.fetch(tokens, lps)
                if step + 1 < max_steps:
                    next_logits = stepper.forward(tokens)  # speculative: wasted only if all rows stop here
                tok_list, lp_list = pending()
            else:
                tok_list, lp_list = tokens.tolist(), lps.tolist()
            for j, r in enumerate(rows):
                if reasons[r] is not None:
                    continue
                out_ids[r].append(tok_list[j])
                out_lps[r].append(lp_list[j])
                produced = len(out_ids[r])
                if produced >= params.min_new_tokens:
                    if tok_list[j] in eos:
                        reasons[r] = "eos"
                    elif params.stop and (hit := checker.hit(out_ids[r])) is not None:
                        reasons[r], stops[r] = "stop", hit
                if reasons[r] is None and produced >= limits[r]:
                    reasons[r] = "length"
            self.last_stats["steps"] = step + 1
            alive = [j for j, r in enumerate(rows) if reasons[r] is None]
            if not alive:
                break
            keep = stepper.compact(alive, len(rows))
            if keep is not None:
                tokens = tokens[keep]
                rows = [rows[j] for j in alive]
                next_logits = next_logits[keep] if next_logits is not None else None
                self.last_stats["compactions"] += 1
            logits = next_logits if next_logits is not None else stepper.forward(tokens)
        if self._static is not None and mode != "eager":  # graphs captured by this call (0: all reused)
            self.last_stats["graph_captures"] = self._static.captures - captured_before
            self.last_stats["capture_seconds"] = self._static.capture_seconds - capture_seconds_before
        self.last_stats["seconds"] = time.perf_counter() - t0  # prefill + decode (the host's view)
        self.last_stats["tokens"] = sum(len(x) for x in out_ids)
        return out_ids, out_lps, reasons, stops


def _merge_stats(parts: list[dict]) -> dict:
    """The ``last_stats`` of a call from its chunks': counts, steps (run one chunk after another) and
    seconds add up, the prefill width is the widest, ``decode`` is the last chunk's mode."""
    out = dict(parts[-1])
    for key in ("rows", "prefill_rows", "steps", "compactions", "graph_captures", "capture_seconds", "seconds",
                "tokens"):
        if any(key in p for p in parts):
            out[key] = sum(p.get(key, 0) for p in parts)
    if any("prefill_width" in p for p in parts):
        out["prefill_width"] = max(p.get("prefill_width", 0) for p in parts)
    return out


class _EagerStepper:
    """The eager decode step: a growing KV cache, a 2D mask one column longer per step, and
    finished rows dropped once at most ``compact_ratio`` of the batch is still running."""

    def __init__(self, gen: HFGenerator, cache, mask: torch.Tensor, next_pos: torch.Tensor):
        self.gen, self.cache, self.mask, self.next_pos = gen, cache, mask, next_pos

    def compact(self, alive: list[int], current: int) -> torch.Tensor | None:
        if len(alive) > self.gen.compact_ratio * current:
            return None
        keep = torch.tensor(alive, device=self.mask.device)
        self.cache.reorder_cache(keep)
        self.mask, self.next_pos = self.mask[keep], self.next_pos[keep]
        return keep

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)  # [B, P + t + 1]
        out = self.gen.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask,
            position_ids=self.next_pos[:, None],
            use_cache=True,
            **{self.gen._cache_kw: self.cache},
        )
        self.next_pos = self.next_pos + 1
        return out.logits[:, -1, :]  # the cache was updated in place


def _check_prompts(prompts: list[list[int]], vocab_size: int) -> None:
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty: every prompt needs at least one token id")
        bad = [t for t in p if not 0 <= int(t) < vocab_size]
        if bad:
            raise ValueError(
                f"prompt {i} has token ids outside the model's vocabulary (size {vocab_size}): "
                f"{bad[:5]}; tokenize with the model's own tokenizer"
            )
