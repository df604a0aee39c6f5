"""Static-cache decode steps for ``HFGenerator``, replayed as CUDA graphs on a GPU.

A decode step of a small model is launch-bound (a 24-layer Llama launches ~400 kernels per
token), so the eager loop spends its time in Python and the CUDA driver, not on the GPU. Here
one decode step is made shape-static and captured once as a ``torch.cuda.CUDAGraph``:

- ``_Storage`` holds everything the step reads or writes, at fixed addresses: the KV cache of
  every layer ``[rows, H, cap, D]`` (``cap`` = prompt width + new tokens, rounded up to 128 so
  that calls of similar length reuse it), the input tokens ``[rows, 1]``, the position ids
  ``[rows, 1]``, the column this step writes ``write_pos [1]`` (all rows are left-padded to
  the same width, so they write the same column), and a 4D attention mask ``[rows, 1, 1, cap]``
  (bool for sdpa, additive float for the eager kernel). A prebuilt 4D mask is returned as-is by
  transformers' ``create_causal_mask``, so no mask code (with its host syncs) runs in the step.
- ``_step`` = open this step's mask column, forward one token per row (``_StaticKVLayer``
  writes K/V at ``write_pos`` with ``index_copy_``), advance positions and ``write_pos``, all
  with device tensors: replaying the graph advances the state by itself.
- Graphs are captured per batch bucket (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, ...) and adapter
  state (``hf.adapter_key``: a LoRA adapter switched off is a different Python path, and with
  separate policies each role's adapter is a different set of weights, so its name is in the key). A bucket's buffers are the
  leading rows of the storage, so when rows finish the survivors are gathered to the front and
  a bucket at most half as large runs on the same memory.
- Grouped-query attention: transformers repeats K/V to every query head before SDPA whenever a
  mask is given (a copy of the whole cache per layer per step, most of the step's memory
  traffic). The step instead runs ``_packed_gqa_sdpa`` (registered as an attention
  implementation, selected only while the step's Python runs): the query heads of one KV head
  become that head's "query positions" (one decode token each, one mask row for all), so SDPA
  reads the cache once. If a capture with it fails, the plain sdpa path is captured instead.
- Sampling, stop strings and bookkeeping stay outside the graph (``HFGenerator`` runs them on
  the logits the step returns), so the random draws and the results are those of the eager loop.
- Capture runs under ``torch.autocast(..., cache_enabled=False)``: with the autocast weight
  cache on, the graph would read bf16 weight copies that autocast frees when it exits.
- The graphs hold the weights' addresses: a change of any parameter's storage (a reload, a
  ZeRO-3 gather into new memory) drops them and the next call captures again. In-place
  optimizer updates keep the addresses, so graphs live across training steps - as long as their
  storage is kept between calls (at most 2 GiB and 5% of the GPU in all, ``end_call``): a larger KV
  cache (e.g. 256 rows of a long multi-turn rollout) is freed for the update pass and its graphs are
  captured again at the next call (``last_stats['graph_captures']`` counts a call's captures).

Without CUDA (or with ``use_graphs=False``) the same ``_step`` runs eagerly: the tests check
that this static path gives the eager loop's tokens and logprobs.
"""
from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

log = logging.getLogger(__name__)

CAPACITY_STEP = 128  # cache capacities are rounded up to this many positions
WARMUP_STEPS = 2  # eager steps on a side stream before a capture (allocator, cuBLAS workspaces)
_MAX_STORAGES = 2  # capacities kept alive at once (each holds a full KV cache)
_KEEP_BYTES = 2 << 30  # storages kept between calls total at most this (and 5% of the GPU)
_SUPPORTED_ATTENTION = ("sdpa", "eager")
# train.packing switches sdpa/eager models to trainer.packing's varlen attention, which is sdpa for
# ordinary (unpacked) calls such as these decode steps: treat it as sdpa.
_AS_SDPA = ("selfplay_varlen",)


def _impl(config) -> str | None:
    impl = getattr(config, "_attn_implementation", None)
    return "sdpa" if impl in _AS_SDPA else impl


def batch_bucket(n: int) -> int:
    """The smallest captured batch size >= n: powers of two up to 16, then also 1.5x steps."""
    b = 1
    while True:
        if b >= n:
            return b
        if b >= 16 and b + b // 2 >= n:
            return b + b // 2
        b *= 2


def capacity_bucket(n: int) -> int:
    return max(CAPACITY_STEP, math.ceil(n / CAPACITY_STEP) * CAPACITY_STEP)


# model types whose static-cache step matched the eager loop in tests/trainer/test_static_decode.py
# (and in a sweep on the CPU); "auto" turns graphs on for these only, an explicit True tries any
AUTO_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral", "gemma", "phi3", "olmo2", "granite", "smollm3",
                              "glm", "gpt_neox"})


def model_type(model) -> str | None:
    return getattr(_inner_config(model), "model_type", None)


def unsupported_reason(model) -> str | None:
    """Why the static decode step cannot run this model (None = it can).

    The step hands the model one prebuilt full-attention 4D mask, so models that need another
    mask per layer (sliding windows, hybrid layer types) or a kernel that takes no 4D mask
    (flash-attention 2) stay on the eager loop."""
    config = _inner_config(model)
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    impl = _impl(cfg) or _impl(config)
    if impl not in _SUPPORTED_ATTENTION:
        return f"attention implementation {impl!r} (supported: {', '.join(_SUPPORTED_ATTENTION)})"
    layer_types = getattr(cfg, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        return f"layer types {sorted(set(layer_types))} (only full attention is supported)"
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return "sliding-window attention"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    if rope_type in ("dynamic", "longrope"):  # they read the longest position on the host every step
        return f"rope type {rope_type!r}"
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder model"
    return None


PACKED_SDPA = "selfplay_packed_gqa_sdpa"


def _packed_gqa_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """SDPA for one decode token per row under a [B, 1, 1, S] mask, without repeating K/V.

    query [B, Hq, 1, D] -> [B, Hkv, G, D] (query head h = kv head h // G, as ``repeat_kv``
    maps them); key/value [B, Hkv, S, D]; the mask broadcasts over the G "positions". Returns
    [B, 1, Hq, Dv] like transformers' sdpa_attention_forward, which any other case goes to."""
    b, hq, q_len, d = query.shape
    hkv = key.shape[1]
    plain = (q_len != 1 or hkv == hq or hq % hkv or attention_mask is None or attention_mask.dim() != 4
             or attention_mask.shape[1] != 1 or attention_mask.shape[2] != 1
             or kwargs.get("position_bias") is not None or module.training)
    if plain:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    q = query.reshape(b, hkv, hq // hkv, d)  # [B, Hkv, G, D]
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, scale=scaling)  # [B, Hkv, G, Dv]
    return out.reshape(b, hq, 1, value.shape[-1]).transpose(1, 2).contiguous(), None  # [B, 1, Hq, Dv]


def _register_packed_attention() -> bool:
    """Register ``_packed_gqa_sdpa`` with transformers (imported here, not at module import:
    transformers' modeling_utils takes seconds to import). False when this version lacks it."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: F401
    except ImportError:  # pragma: no cover - other transformers versions
        return False
    AttentionInterface.register(PACKED_SDPA, _packed_gqa_sdpa)
    return True


def _inner_config(model):
    """The config object the attention modules read (a peft wrapper's base model's)."""
    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return inner.config


class _StaticKVLayer(DynamicLayer):
    """A cache layer over fixed buffers ``[rows, H, cap, D]``: each update writes the step's
    K/V at column ``write_pos`` (a device tensor, so a replayed graph writes the next column)
    and returns the whole buffers (the 4D mask hides the columns not written yet)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, write_pos: torch.Tensor):
        super().__init__()
        self.keys, self.values, self.write_pos = keys, values, write_pos
        self.device = keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # buffers exist already
        return None

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys.index_copy_(2, self.write_pos, key_states.to(self.keys.dtype))
        self.values.index_copy_(2, self.write_pos, value_states.to(self.values.dtype))
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int, *args) -> tuple[int, int]:
        return self.keys.shape[-2], 0

    def get_max_length(self) -> int:
        return self.keys.shape[-2]


class _Storage:
    """Every tensor a decode step touches, for ``rows`` rows and ``cap`` positions."""

    def __init__(self, rows: int, cap: int, like_k: list[torch.Tensor], like_v: list[torch.Tensor],
                 kv_dtype: torch.dtype | None, mask_dtype: torch.dtype, device: torch.device):
        self.rows, self.cap = rows, cap
        self.k = [torch.zeros(rows, t.shape[1], cap, t.shape[3], dtype=kv_dtype or t.dtype, device=device)
                  for t in like_k]  # per layer [rows, H, cap, Dk]
        self.v = [torch.zeros(rows, t.shape[1], cap, t.shape[3], dtype=kv_dtype or t.dtype, device=device)
                  for t in like_v]  # per layer [rows, H, cap, Dv]
        self.ids = torch.zeros(rows, 1, dtype=torch.long, device=device)  # [rows, 1]
        self.pos = torch.zeros(rows, 1, dtype=torch.long, device=device)  # [rows, 1]
        self.write_pos = torch.zeros(1, dtype=torch.long, device=device)  # [1]
        if mask_dtype == torch.bool:
            self.on, self.off = True, False
        else:  # additive mask, as transformers builds it for the eager kernel
            self.on, self.off = 0.0, torch.finfo(mask_dtype).min
        self.mask = torch.full((rows, 1, 1, cap), self.off, dtype=mask_dtype, device=device)  # [rows, 1, 1, cap]
        self.host: torch.Tensor | None = None  # pinned [2, rows]: tokens and logprobs of a step
        self.copied = None  # the CUDA event recorded after that copy
        self.caches: dict[int, Cache] = {}
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def fits(self, rows: int, cap: int, like_k, like_v, kv_dtype, mask_dtype) -> bool:
        return (self.rows >= rows and self.cap == cap and self.mask.dtype == mask_dtype
                and len(self.k) == len(like_k)
                and all(s.dtype == (kv_dtype or t.dtype) and s.shape[1] == t.shape[1] and s.shape[3] == t.shape[3]
                        for s, t in zip(self.k + self.v, list(like_k) + list(like_v))))

    def cache(self, bucket: int) -> Cache:
        """The cache over the leading ``bucket`` rows (views: every bucket shares the memory)."""
        if bucket not in self.caches:
            layers = [_StaticKVLayer(k[:bucket], v[:bucket], self.write_pos) for k, v in zip(self.k, self.v)]
            self.caches[bucket] = Cache(layers=layers)
        return self.caches[bucket]


def repair_rng_after_failed_capture(device: torch.device) -> bool:
    """Put the device's default CUDA generator back in its normal (not capturing) state after a capture
    that raised; returns True if it works again.

    A capture registers the default generator (its prologue marks it "capturing") and only a capture
    that ends cleanly runs the epilogue. When ``capture_end`` itself raises (the capture was invalidated
    by an error inside it, an allocation failure, a host sync), the mark stays, and every later random
    draw on that GPU fails with "Offset increment outside graph capture encountered unexpectedly" -
    including the eager loop this generator falls back to, so one failed capture crashed a run at its
    next sampling step. A tiny capture that ends cleanly runs prologue and epilogue again and clears
    the mark; failing that, the generator gets a fresh copy of its own state (same seed and offset).
    """
    def draws() -> bool:
        try:
            torch.rand(1, device=device)
            return True
        except RuntimeError:
            return False

    if draws():
        return True
    try:
        probe = torch.zeros(1, device=device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            probe.add_(1)
        del graph
    except Exception:  # noqa: BLE001 - try the other way below
        log.warning("HFGenerator: the clean-up capture after a failed capture failed too", exc_info=True)
    if draws():
        return True
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        generator = torch.cuda.default_generators[index]
        generator.graphsafe_set_state(generator.clone_state())
    except Exception:  # noqa: BLE001
        log.warning("HFGenerator: could not reset the CUDA generator's state", exc_info=True)
    ok = draws()
    if not ok:
        log.error("HFGenerator: the CUDA random generator is unusable after a failed graph capture")
    return ok


class StaticDecoder:
    """Owns the storages and captured graphs of one model (kept across generate calls)."""

    def __init__(self, model, cache_kw: str, *, use_graphs: bool, autocast_dtype: torch.dtype | None):
        self.model = model
        self.cache_kw = cache_kw
        self.use_graphs = use_graphs
        self.autocast_dtype = autocast_dtype
        self.storages: list[_Storage] = []  # most recently used last
        self.captures = 0
        self.capture_seconds = 0.0  # spent capturing (warm-up, capture, replay check), over the decoder's life
        self.overlap: bool | None = None  # run step t+1 before reading step t (None = with graphs)
        self.config = _inner_config(model)
        self.pack_gqa = _impl(self.config) == "sdpa" and _register_packed_attention()
        self._fingerprint: tuple | None = None

    # -- storage -----------------------------------------------------------------------------
    def _weights_moved(self) -> bool:
        """Did any parameter or buffer change its address since the graphs were captured?"""
        fp = tuple(t.data_ptr() for t in self.model.parameters()) + tuple(b.data_ptr() for b in self.model.buffers())
        moved = self._fingerprint is not None and fp != self._fingerprint
        self._fingerprint = fp
        return moved

    def end_call(self) -> None:
        """Free the storages that would keep too much memory between calls (the update pass
        needs it): the most recent ones are kept while they total at most 2 GiB and 5% of the
        GPU; they and their graphs serve the next call of the same shape."""
        keep, total = [], 0
        for st in reversed(self.storages):
            limit = _KEEP_BYTES
            if st.ids.device.type == "cuda":
                limit = min(limit, torch.cuda.get_device_properties(st.ids.device).total_memory // 20)
            if total + st.nbytes() <= limit:
                keep.insert(0, st)
                total += st.nbytes()
        if len(keep) != len(self.storages):
            self.storages = keep
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def storage(self, rows: int, cap: int, like_k, like_v, device) -> _Storage:
        if self.use_graphs and self._weights_moved():
            for st in self.storages:
                st.graphs.clear()
        kv_dtype = self.autocast_dtype  # under autocast attention reads K/V in this dtype anyway
        impl = _impl(self.config)
        mask_dtype = torch.bool if impl == "sdpa" else self.model.get_input_embeddings().weight.dtype
        for st in self.storages:
            if st.fits(rows, cap, like_k, like_v, kv_dtype, mask_dtype):
                self.storages.remove(st)
                self.storages.append(st)
                return st
        self.storages = [st for st in self.storages if st.cap != cap][-(_MAX_STORAGES - 1):]
        if device.type == "cuda":
            torch.cuda.empty_cache()
        st = _Storage(rows, cap, like_k, like_v, kv_dtype, mask_dtype, device)
        self.storages.append(st)
        return st

    # -- one decode step -----------------------------------------------------------------------
    def _autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype, cache_enabled=False)

    @contextmanager
    def _attention(self):
        """Select the packed-GQA attention while the step's Python runs (and only then)."""
        if not self.pack_gqa:
            yield
            return
        before = self.config._attn_implementation
        self.config._attn_implementation = PACKED_SDPA
        try:
            yield
        finally:
            self.config._attn_implementation = before

    def step(self, st: _Storage, bucket: int) -> torch.Tensor:
        """One token per row of the leading ``bucket`` rows; returns logits [bucket, V]."""
        mask = st.mask[:bucket]
        mask.index_fill_(3, st.write_pos, st.on)  # this step's column becomes visible
        with self._attention():
            out = self.model(
                input_ids=st.ids[:bucket],
                attention_mask=mask,
                position_ids=st.pos[:bucket],
                use_cache=True,
                **{self.cache_kw: st.cache(bucket)},
            )
        st.pos[:bucket].add_(1)
        st.write_pos.add_(1)
        return out.logits[:, -1, :]

    def graph(self, st: _Storage, bucket: int, key) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """The captured step of ``bucket`` rows (captured on first use). The warm-up steps move
        the state; it is restored, and the K/V columns they wrote are hidden by the mask and
        written again by the real steps."""
        full_key = (bucket, key)
        if full_key in st.graphs:
            return st.graphs[full_key]
        t0 = time.perf_counter()
        try:
            graph, logits = self._capture(st, bucket)
        except Exception:  # noqa: BLE001 - try once more with transformers' own sdpa path
            if not self.pack_gqa:
                raise
            log.warning("HFGenerator: capturing the decode step with packed-GQA attention failed; "
                        "capturing it with transformers' sdpa attention instead", exc_info=True)
            self.pack_gqa = False
            graph, logits = self._capture(st, bucket)
        st.graphs[full_key] = (graph, logits)
        self.captures += 1
        self.capture_seconds += time.perf_counter() - t0
        return graph, logits

    def _capture(self, st: _Storage, bucket: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        device = st.ids.device
        saved = (st.pos[:bucket].clone(), st.write_pos.clone(), st.mask[:bucket].clone())
        try:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side), self._autocast(device):
                for _ in range(WARMUP_STEPS):
                    self.step(st, bucket)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with self._autocast(device), torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    logits = self.step(st, bucket)
            except BaseException:
                repair_rng_after_failed_capture(device)
                raise
            self._check_replay(st, bucket, saved, graph, logits)
        finally:
            self._restore(st, bucket, saved)
        return graph, logits

    @staticmethod
    def _restore(st: _Storage, bucket: int, saved) -> None:
        st.pos[:bucket].copy_(saved[0])
        st.write_pos.copy_(saved[1])
        st.mask[:bucket].copy_(saved[2])

    def _check_replay(self, st: _Storage, bucket: int, saved, graph, logits) -> None:
        """Replay the new graph once and run the same step eagerly from the same state: the
        logits must agree (a graph that reads the wrong memory would otherwise go unnoticed)."""
        self._restore(st, bucket, saved)
        graph.replay()
        replayed = logits.float().clone()
        self._restore(st, bucket, saved)
        with self._autocast(st.ids.device):
            eager = self.step(st, bucket).float()
        # relative L2 error: bf16 rounding (another GEMM algorithm) gives ~1e-2, reading the
        # wrong memory gives ~1; NaN fails the test too
        rel = ((replayed - eager).norm() / eager.norm().clamp_min(1e-6)).item()
        if not rel <= 0.05:
            raise RuntimeError(f"the captured decode step disagrees with the eager step (relative L2 error {rel:.3g})")


class StaticStepper:
    """The decode state of one generate call over a ``_Storage`` (the HFGenerator loop asks it
    for logits and tells it which rows are still running)."""

    def __init__(self, decoder: StaticDecoder, cache, mask2d: torch.Tensor, next_pos: torch.Tensor,
                 expand: torch.Tensor, max_steps: int, adapter_key, min_capacity: int = 0):
        n = len(expand)
        width = mask2d.shape[1]
        like_k = [layer.keys for layer in cache.layers]
        like_v = [layer.values for layer in cache.layers]
        device = mask2d.device
        self.decoder, self.key = decoder, adapter_key
        self.n, self.bucket = n, batch_bucket(n)
        # + WARMUP_STEPS: a capture late in the call writes (hidden) columns past the last step
        # min_capacity: the whole call's, so that the chunks of one call (HFGenerator) share one storage
        cap = max(capacity_bucket(width + max_steps + WARMUP_STEPS), capacity_bucket(min_capacity))
        st = self.st = decoder.storage(self.bucket, cap, like_k, like_v, device)
        for sk, sv, layer in zip(st.k, st.v, cache.layers):
            sk[:n, :, :width] = layer.keys.index_select(0, expand)
            sv[:n, :, :width] = layer.values.index_select(0, expand)
            sk[:n, :, width:].zero_()  # stale values are hidden, but 0 * NaN would not be
            sv[:n, :, width:].zero_()
            sk[n:].zero_()
            sv[n:].zero_()
        st.mask[:n, 0, 0, :width] = torch.where(mask2d.index_select(0, expand).bool(), st.on, st.off)
        st.mask[:n, :, :, width:] = st.off
        st.mask[n:] = st.off
        st.mask[n:, :, :, 0] = st.on  # padding rows see one position (no all-masked softmax)
        st.pos[:n, 0] = next_pos.index_select(0, expand)
        st.pos[n:] = 0
        st.write_pos.fill_(width)
        self.overlap = decoder.use_graphs if decoder.overlap is None else decoder.overlap
        if decoder.use_graphs:  # capture now, before any token is sampled (a failure costs no draws)
            decoder.graph(st, self.bucket, adapter_key)

    def compact(self, alive: list[int], current: int) -> torch.Tensor | None:
        """Gather the running rows to the front once they fit a bucket of at most half the
        current one (so a call captures a few graphs, not one per bucket); returns the kept
        indices (None = nothing moved)."""
        if 2 * batch_bucket(len(alive)) > self.bucket:
            return None
        st, n = self.st, len(alive)
        keep = torch.tensor(alive, device=st.ids.device)
        for buf in st.k + st.v:
            buf[:n] = buf[:current].index_select(0, keep)
        st.mask[:n] = st.mask[:current].index_select(0, keep)
        st.pos[:n] = st.pos[:current].index_select(0, keep)
        self.n, self.bucket = n, batch_bucket(n)
        return keep

    def fetch(self, tokens: torch.Tensor, lps: torch.Tensor):
        """Start copying (tokens, logprobs) to the host; returns a function that waits for that
        copy only (not for the graph replays queued after it) and gives the two lists."""
        n, st = len(tokens), self.st
        if st.ids.device.type != "cuda":  # nothing runs asynchronously: read now
            lists = tokens.tolist(), lps.tolist()
            return lambda: lists
        if st.host is None:
            st.host = torch.empty(2, st.rows, dtype=torch.float64, pin_memory=True)  # [2, rows]
            st.copied = torch.cuda.Event()
        host = st.host[:, :n]
        host.copy_(torch.stack((tokens.to(torch.float64), lps.to(torch.float64))), non_blocking=True)
        st.copied.record(torch.cuda.current_stream(st.ids.device))

        def wait() -> tuple[list[int], list[float]]:
            st.copied.synchronize()
            toks, values = host.tolist()
            return [int(t) for t in toks], values

        return wait

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [n, V] after feeding ``tokens`` [n] (one per running row)."""
        st, n = self.st, len(tokens)
        st.ids[:n, 0].copy_(tokens)
        if self.decoder.use_graphs:
            graph, logits = self.decoder.graph(st, self.bucket, self.key)
            graph.replay()
        else:
            logits = self.decoder.step(st, self.bucket)
        return logits[:n]
