"""Opt-in ``torch.compile`` of the decoder layers for the update pass (``model.compile``).

Regional compilation: every decoder layer of a transformers model runs the same code, so each
layer gets its own compiled entry point but they share one compiled graph (dynamo caches by
code object and, with its default inlining of nn.Modules, treats the weights as inputs, not
constants): the first forward/backward pays the compile once, for all layers.

What it keeps, and why:
- parameter names and state_dict keys are unchanged: nothing is wrapped; the layer's
  ``_compiled_call_impl`` is set exactly as ``nn.Module.compile()`` does it (checkpoints,
  DeepSpeed, the vLLM weight push and LoRA merges read weights by name);
- the compiled code runs only for a training forward (``module.training`` and grad enabled,
  no KV cache passed). Rollouts (the HF decode loop, the CUDA-graph static decode), reference
  log-probs, evaluation and the shared-prompt path of the update (which fills a KV cache) run
  the same layer eagerly, so they neither recompile nor change;
- shapes are dynamic (``dynamic=True``): packed micro-batches change the token count on every
  call and padded ones change batch and length, so one graph serves them all (a size-1 batch,
  e.g. a packed row, gets its own specialised graph: 0/1 sizes are always specialised);
- the packed attention (``selfplay_varlen``, trainer/packing.py) is traced like any other code;
  where dynamo cannot follow it (the per-sequence SDPA loop reads ``cu_seqlens`` on the host)
  it breaks the graph there and runs that piece eagerly;
- gradient checkpointing (transformers wraps the layer's ``forward``) is traced as a
  checkpointed region, so recomputation in backward runs compiled code too.

``compiled_logprobs_and_entropy()`` is the second compiled region: the update's per-token
log-probs and entropy from the [N, V] logits (``trainer.algos.losses.logprobs_and_entropy``),
fused into a few kernels instead of a dozen float32 passes over the logits.

When compilation fails (no C compiler for inductor, an unsupported Python or op), the first
training step raises ``CompileFailed`` naming ``model.compile`` and how to turn it off; no
silent fallback to eager, so a benchmark never reports eager numbers as compiled ones.
"""
from __future__ import annotations

import functools

import torch

# The torch.compile backend. Private knob for tests only: they set it to "aot_eager" (same
# dynamo capture and AOT autograd, no inductor codegen: seconds instead of ~40 s per graph on CPU).
_BACKEND = "inductor"


class CompileFailed(RuntimeError):
    """torch.compile for model.compile failed; the message says how to run without it."""


def check_supported(cfg) -> None:
    """Refuse combinations model.compile does not handle: ZeRO-3 gathers each layer's weights in
    forward hooks that would be traced into the compiled graph (DeepSpeed needs its own compile)."""
    t = cfg.train
    if t.engine == "deepspeed" and t.zero_stage == 3:
        raise CompileFailed("model.compile does not work with train.engine=deepspeed and train.zero_stage=3 "
                            "(ZeRO-3 gathers weights in hooks inside the layers); use zero_stage 2 or "
                            "model.compile=false")


def decoder_layers(model) -> list[torch.nn.Module]:
    """The decoder layers of a (possibly peft-wrapped) transformers causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise CompileFailed(
            f"model.compile: cannot find the decoder layers of {type(base).__name__} (no decoder.layers "
            "ModuleList); set model.compile=false for this model")
    return list(layers)


def _wants_compiled(layer: torch.nn.Module, kwargs: dict) -> bool:
    """A training forward: the layer trains, autograd records, no KV cache is read or written."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    return layer.training and torch.is_grad_enabled() and cache is None


def _failure(exc: BaseException) -> CompileFailed:
    return CompileFailed(
        f"model.compile=true, but torch.compile (decoder layers, update loss) failed: {type(exc).__name__}: "
        f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''} "
        "(inductor needs a working C/C++ compiler on CPU, and Triton on GPU). "
        "Set model.compile=false to train eagerly.")


def _run_compiled(compiled, args, kwargs):
    """Call a torch.compiled function; a compile failure becomes ``CompileFailed``."""
    try:
        return compiled(*args, **kwargs)
    except (torch._dynamo.exc.BackendCompilerFailed, torch._dynamo.exc.Unsupported,
            torch._dynamo.exc.InternalTorchDynamoError) as exc:
        raise _failure(exc) from exc
    except Exception as exc:  # inductor's own errors (e.g. a missing C compiler) arrive as other types
        if type(exc).__module__.startswith(("torch._inductor", "torch._dynamo")):
            raise _failure(exc) from exc
        raise


class _LayerCall:
    """A layer's ``_compiled_call_impl``: compiled for training forwards, eager otherwise.

    A deep copy of the layer (the frozen reference model, the vLLM LoRA merge) runs eagerly:
    ``nn.Module.__getstate__`` drops ``_compiled_call_impl``.
    """

    def __init__(self, layer: torch.nn.Module, backend, dynamic: bool):
        self.layer, self.backend, self.dynamic = layer, backend, dynamic
        self.compiled = torch.compile(layer._call_impl, backend=backend, dynamic=dynamic)

    def __call__(self, *args, **kwargs):
        if not _wants_compiled(self.layer, kwargs):
            return self.layer._call_impl(*args, **kwargs)
        return _run_compiled(self.compiled, args, kwargs)


def compile_decoder_layers(model, backend=None, dynamic: bool = True) -> int:
    """Compile every decoder layer of ``model`` for training forwards; returns how many.

    Idempotent (a layer already compiled is left alone). Parameter names do not change.
    """
    layers = decoder_layers(model)
    backend = backend or _BACKEND
    try:
        for layer in layers:
            if not isinstance(layer._compiled_call_impl, _LayerCall):
                layer._compiled_call_impl = _LayerCall(layer, backend, dynamic)  # what nn.Module.compile() sets
    except RuntimeError as exc:  # e.g. torch.compile unsupported on this Python
        raise _failure(exc) from exc
    return len(layers)


@functools.lru_cache(maxsize=None)
def _compiled_loss_terms(backend):
    from trainer.algos.losses import logprobs_and_entropy

    compiled = torch.compile(logprobs_and_entropy, backend=backend, dynamic=True)
    return lambda *args, **kwargs: _run_compiled(compiled, args, kwargs)


def compiled_logprobs_and_entropy():
    """``trainer.algos.losses.logprobs_and_entropy`` torch.compiled (one per backend, shared by
    every call): the update's log-probs and entropy from the [N, V] logits in a few fused
    kernels. Used by ``trainer.update`` when ``model.compile`` is on; N is dynamic."""
    try:
        return _compiled_loss_terms(_BACKEND)
    except RuntimeError as exc:  # torch.compile unsupported on this Python
        raise _failure(exc) from exc


def is_compiled(model) -> bool:
    """True when ``compile_decoder_layers`` was applied to every decoder layer of ``model``."""
    try:
        return all(isinstance(layer._compiled_call_impl, _LayerCall) for layer in decoder_layers(model))
    except CompileFailed:
        return False
