"""``VLLMGenerator``: the vLLM backend of the ``Generator`` protocol (``rollout.backend: vllm``).

Two placements (written against vLLM 0.24's API; vLLM 0.20-0.26 pin the device's torch 2.11):

- ``colocate`` (default): vLLM runs IN this process on the trainer's GPU (V1 engine with
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), taking ``rollout.gpu_memory_utilization`` of the card.
  After each optimizer step the trainer's weights are pushed without touching the disk:
  ``llm.apply_model(lambda m: m.load_weights(...))`` on bf16 copies of the parameters (LoRA
  adapters are merged first). ``sleep=True`` frees vLLM's KV cache and moves its weights to
  CPU between rollouts (``llm.sleep(level=1)`` / ``wake_up``) so the update pass gets the memory back
  (run on an H100 in a whole GRPO run, benchmarks/RESULTS.md).
- ``separate``: vLLM's engine runs in its own process on another GPU (``vllm_device``); weights
  travel GPU to GPU by NCCL broadcast through vLLM's weight-transfer engine
  (``init_weight_transfer_engine`` / ``update_weights`` on vLLM's side,
  ``NCCLWeightTransferEngine.trainer_send_weights`` on ours).

The frozen base (a LoRA policy's judge or reference, ``use_adapter=False``): the base weights are
pushed in for that call and the merged policy goes back before the next policy call; each push
is verified the same way (against the trainer's model with its adapter switched off).

Separate policies (one LoRA adapter per role, ``model.policies: separate``): vLLM holds one set of
weights at a time, the merge of the role whose adapter is active (``Policy.acting``); a call in
another role pushes that role's merge first, and every push is verified as above. Untested on a GPU
so far: each role switch costs a push (two per step where roles alternate), and vLLM's own
multi-LoRA serving is not used.

When to sync: every ``generate`` compares the parameters' in-place version counters with those
seen at the last push; an optimizer step (torch or DeepSpeed, which write the weights in
place) bumps them, so the push happens exactly once per step, before the next rollout.

Safety: after every push ``verify()`` scores a fixed token sequence with vLLM (prompt
log-probs) and with the trainer's model, and raises ``WeightSyncError`` when the mean absolute
difference exceeds ``check_tol`` (bf16 kernels differ by ~1e-2; a stale or mis-mapped weight
gives ~1 or more). Log-probs of sampled tokens are asked for only when the trainer needs them
(``SamplingParams.logprobs``: by default with vLLM, ``train.old_logprobs: auto``, the trainer's own
log-probs are the PPO reference and vLLM computes none). They come back in vLLM's ``processed_logprobs``
mode: ``log_softmax(logits / T)`` like HFGenerator, except that vLLM takes them after
``min_tokens``' EOS masking and top-p (a small, known difference the trainer's recomputation
removes). ``train.rollout_is_cap`` turns on the truncated importance-sampling correction
between the trainer's and vLLM's log-probs (trainer.update.rollout_is).
"""
from __future__ import annotations

import contextlib
import os
import threading

import torch

from trainer.rollout.types import Completion, SamplingParams

MODES = ("colocate", "separate")
# Set by torchrun / the DeepSpeed launcher in each rank; kept away from a separate engine's process.
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                  "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


class WeightSyncError(RuntimeError):
    """vLLM's log-probs no longer match the trainer's after a weight push."""


def flat_sampled_logprobs(ids: list[int], start: list[int], end: list[int], token_ids: list[int],
                          logprobs: list[float]) -> list[float]:
    """The log-prob of each sampled token from vLLM's flat layout (``FlatLogprobs``: position i's
    entries are ``[start[i], end[i])`` of the flat ``token_ids`` / ``logprobs`` lists). With
    ``logprobs=0`` each position holds just the sampled token; nan where it is missing."""
    out = []
    for i, tok in enumerate(ids[: len(start)]):
        value = float("nan")
        for k in range(start[i], end[i]):
            if token_ids[k] == tok:
                value = float(logprobs[k])
                break
        out.append(value)
    return out


def _sampled_logprobs(ids: list[int], lp) -> list[float]:
    if lp is None:
        return []
    if hasattr(lp, "start_indices"):  # FlatLogprobs (SamplingParams(flat_logprobs=True)): no per-token objects
        return flat_sampled_logprobs(ids, lp.start_indices, lp.end_indices, lp.token_ids, lp.logprobs)
    out = []
    for tok, entry in zip(ids, lp):
        value = entry.get(tok) if entry else None
        out.append(float(value.logprob) if value is not None else float("nan"))
    return out


def _completion_of(out, params: SamplingParams, tokenizer, eos_ids: set[int]) -> Completion:
    """One vLLM CompletionOutput -> our Completion (ids never cut; logprob of each sampled token)."""
    ids = list(out.token_ids)
    lps = _sampled_logprobs(ids, out.logprobs) if params.logprobs else [float("nan")] * len(ids)
    if len(lps) != len(ids):
        raise RuntimeError(f"vLLM returned {len(lps)} logprobs for {len(ids)} tokens; request logprobs=0")
    stop = out.stop_reason if isinstance(out.stop_reason, str) else None
    if out.finish_reason == "length":
        reason = "length"
    elif stop is not None:
        reason = "stop"
    elif ids and ids[-1] in eos_ids:
        reason = "eos"
    else:
        reason = "stop"
    return Completion(prompt_ids=[], completion_ids=ids, logprobs=lps,
                      text=tokenizer.decode(ids, skip_special_tokens=True), finish_reason=reason, stop=stop,
                      temperature=params.logprob_temperature)


def _weights_for_vllm(model, adapter: bool = True) -> list[tuple[str, torch.Tensor]]:
    """(HF name, bf16 tensor) of the full model, tied head skipped. A LoRA model gives its
    merged weights W + scale * B @ A, or with ``adapter=False`` its frozen base W."""
    base = model
    if hasattr(model, "peft_config"):
        if not adapter and (frozen := _frozen_base_state(model)) is not None:
            return _bf16_items(frozen, model.get_base_model().config)
        import copy

        copied = copy.deepcopy(model)
        # several adapters (separate policies): merge the active role's only
        base = copied.merge_and_unload(adapter_names=[active_adapter(model)]) if adapter else copied.unload()
    return _bf16_items(base.state_dict(), base.config)


def active_adapter(model) -> str | None:
    """The name of a peft model's one active adapter (None without peft); several at once is refused."""
    if not hasattr(model, "peft_config"):
        return None
    active = model.active_adapter
    if not isinstance(active, str):
        raise ValueError(f"vLLM rollouts merge one LoRA adapter at a time, but {list(active)} are active together")
    return active


def _bf16_items(state: dict, config) -> list[tuple[str, torch.Tensor]]:
    tied = getattr(config, "tie_word_embeddings", False)
    return [(name, p.detach().to(torch.bfloat16)) for name, p in state.items() if not (tied and name == "lm_head.weight")]


def _frozen_base_state(model) -> dict | None:
    """A LoRA model's base weights under their plain names, read in place (no copy of the model):
    ``...q_proj.base_layer.weight`` -> ``...q_proj.weight``, adapter tensors left out. None when the
    adapter also replaces whole modules (``modules_to_save``): the caller unloads a copy instead."""
    state = model.get_base_model().state_dict()
    if any("modules_to_save" in name or "original_module" in name for name in state):
        return None
    return {name.replace(".base_layer.", "."): t for name, t in state.items() if ".lora_" not in name}


def _param_versions(model) -> tuple[int, ...]:
    return tuple(p._version for p in model.parameters())


class VLLMGenerator:
    """Batched sampling through vLLM with weights kept in step with the trainer's model."""

    def __init__(self, model, tokenizer, model_path: str, *, mode: str = "colocate", gpu_memory_utilization: float = 0.35,
                 max_model_len: int | None = None, seed: int = 0, sleep: bool = False, check_tol: float = 0.05,
                 vllm_device: int = 1, autocast_dtype: torch.dtype | None = torch.bfloat16, enforce_eager: bool = False,
                 llm_kwargs: dict | None = None, version_fn=None):
        if mode not in MODES:
            raise ValueError(f"vLLM mode must be one of {MODES}, got {mode!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.sleep = sleep and mode == "colocate"
        self.check_tol = check_tol
        self.autocast_dtype = autocast_dtype
        self.eos_ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            self.eos_ids.add(gen_eos)
        elif gen_eos:
            self.eos_ids.update(int(i) for i in gen_eos)
        self._group = None
        # What says "the weights changed": the parameters' in-place version counters, plus the
        # engine's step count (ZeRO-3 keeps the real weights in partitions the model never sees).
        self.version_fn = version_fn
        self._asleep = False
        self._versions: tuple[int, ...] | None = None
        # What vLLM holds: (True, the merged adapter's name) or, after a frozen-base call, (False, None).
        self._holds: tuple[bool, str | None] | None = None
        self.last_check: dict = {}
        self.stats = {"syncs": 0, "sync_seconds": 0.0, "verify_seconds": 0.0}
        kwargs = dict(model=str(model_path), dtype="bfloat16", gpu_memory_utilization=gpu_memory_utilization,
                      seed=seed, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                      enforce_eager=enforce_eager, tokenizer=str(model_path))
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        kwargs.update(llm_kwargs or {})
        self.llm = self._start(kwargs, vllm_device)
        self.sync_weights()  # the trainer's weights may already differ from the files

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_policy(cls, policy, cfg, engine=None) -> "VLLMGenerator":
        """From the run's policy. Several ranks (one process per GPU): colocated, every rank
        runs its own engine through vLLM's ``external_launcher`` (the launcher's process group,
        a different seed per rank); separate, rank r's engine takes GPU ``world_size + r``."""
        from trainer import distributed as dist

        r = cfg.rollout
        mode = getattr(r, "vllm_mode", "colocate")
        kwargs: dict = {}
        device = 1
        if dist.wanted():
            if mode == "colocate":
                kwargs["distributed_executor_backend"] = "external_launcher"
            device = dist.world_size() + dist.local_rank()
        gen = cls(policy.model, policy.tokenizer, policy.path, mode=mode,
                  gpu_memory_utilization=r.gpu_memory_utilization, seed=cfg.seed + dist.rank(),
                  sleep=bool(getattr(r, "vllm_sleep", False)), vllm_device=device,
                  autocast_dtype=policy.autocast_dtype or torch.bfloat16, llm_kwargs=kwargs,
                  version_fn=(lambda: engine.steps) if engine is not None else None)
        return gen

    def _start(self, kwargs: dict, vllm_device: int):
        from vllm import LLM

        if self.mode == "colocate":
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in this process: load_weights in place
            return LLM(enable_sleep_mode=self.sleep, **kwargs)
        from vllm.config import WeightTransferConfig

        # The engine process inherits this environment: it sees only its GPU, and none of the
        # launcher's rank variables (vLLM reads LOCAL_RANK & co. for its own world of one).
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k in _LAUNCHER_VARS or k.startswith("TORCHELASTIC_")}
        saved.setdefault("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
        os.environ["CUDA_VISIBLE_DEVICES"] = str(vllm_device)
        try:
            llm = LLM(weight_transfer_config=WeightTransferConfig(backend="nccl"), **kwargs)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        self._init_nccl(llm)
        return llm

    def _init_nccl(self, llm) -> None:
        """Rendezvous of the trainer (rank 0) and vLLM's worker (rank 1) for weight broadcasts."""
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        from trainer.distributed import free_port

        info = {"master_address": "127.0.0.1", "master_port": free_port(), "rank_offset": 1, "world_size": 2}
        worker = threading.Thread(target=llm.init_weight_transfer_engine, args=({"init_info": info},))
        worker.start()
        self._group = NCCLWeightTransferEngine.trainer_init(info)
        worker.join()

    # -- weights ----------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _weights_version(self) -> tuple:
        return (_param_versions(self.model), self.version_fn() if self.version_fn else None)

    def use_model(self, model) -> None:
        """Sample from another trainer model of the same architecture (an evaluation walking over
        checkpoints): its weights are pushed, and checked, before the next rollout."""
        self.model = model
        self._versions = None

    def _wanted(self, use_adapter: bool) -> tuple[bool, str | None]:
        return (True, active_adapter(self.model)) if use_adapter else (False, None)

    @property
    def _holds_adapter(self) -> bool:
        return self._holds is None or self._holds[0]

    def needs_sync(self, use_adapter: bool = True) -> bool:
        """The weights moved, or the call wants other weights than vLLM holds (the frozen base, or
        another role's adapter with separate policies)."""
        return self._holds != self._wanted(use_adapter) or self._versions != self._weights_version()

    def sync_weights(self, use_adapter: bool = True) -> None:
        """Push the trainer's current weights into vLLM (no disk), then verify them.
        ``use_adapter=False`` pushes a LoRA policy's frozen base instead (the judge / reference)."""
        import time

        t0 = time.perf_counter()
        weights = _weights_for_vllm(self.model, adapter=use_adapter)
        if self.mode == "colocate":
            self._wake()
            self.llm.apply_model(lambda m: m.load_weights(iter(weights)))
        else:
            self._send_nccl(weights)
        self.llm.reset_prefix_cache()  # cached KV was computed with the old weights
        self._holds = self._wanted(use_adapter)
        self._versions = self._weights_version()
        del weights
        self.stats["syncs"] += 1
        self.stats["sync_seconds"] += time.perf_counter() - t0
        t1 = time.perf_counter()
        self.verify()
        self.stats["verify_seconds"] += time.perf_counter() - t1

    def _send_nccl(self, weights) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        info = {"names": [n for n, _ in weights], "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in weights],
                "shapes": [list(t.shape) for _, t in weights], "packed": True}
        self.llm.start_weight_update()
        receiver = threading.Thread(target=self.llm.update_weights, args=({"update_info": info},))
        receiver.start()
        NCCLWeightTransferEngine.trainer_send_weights(iter(weights), {"group": self._group, "packed": True})
        receiver.join()
        self.llm.finish_weight_update()

    def probe_ids(self, n: int = 48) -> list[int]:
        """A fixed, deterministic token sequence (a sentence of the tokenizer, repeated)."""
        text = "The quick brown fox jumps over the lazy dog. " * 8
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:n]
        return ids if len(ids) >= 2 else list(range(100, 100 + n))

    def verify(self) -> dict:
        """vLLM's vs the trainer's log-probs of ``probe_ids``; raises WeightSyncError if apart."""
        from vllm import SamplingParams as VSP

        ids = self.probe_ids()
        out = self.llm.generate([{"prompt_token_ids": ids}], VSP(max_tokens=1, prompt_logprobs=0, temperature=1.0),
                                use_tqdm=False)[0]
        ours_v = torch.tensor([float(d[t].logprob) for d, t in zip(out.prompt_logprobs[1:], ids[1:])])
        from trainer.rollout.hf import adapter_disabled

        with adapter_disabled(self.model, self._holds_adapter):
            ours_t = self._trainer_logprobs(ids)
        diff = (ours_v - ours_t).abs()
        self.last_check = {"mean_abs": float(diff.mean()), "max_abs": float(diff.max()), "tokens": len(ids) - 1}
        if not self.last_check["mean_abs"] <= self.check_tol:
            raise WeightSyncError(
                f"vLLM and the trainer disagree after the weight push: mean |logprob diff| "
                f"{self.last_check['mean_abs']:.4f} > {self.check_tol} (max {self.last_check['max_abs']:.3f}) on a "
                "fixed sequence; the weights did not arrive (name mapping, dtype, LoRA merge) - stopping")
        return self.last_check

    @torch.no_grad()
    def _trainer_logprobs(self, ids: list[int]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        x = torch.tensor([ids], device=device)
        ctx = torch.autocast(device.type, dtype=self.autocast_dtype) if self.autocast_dtype else contextlib.nullcontext()
        with ctx:
            logits = self.model(input_ids=x).logits[0, :-1].float()  # [L-1, V]
        return torch.log_softmax(logits, -1).gather(1, x[0, 1:, None]).squeeze(1).cpu()

    @staticmethod
    def _fast_output(params: SamplingParams) -> dict:
        """Output options that cost vLLM less per token: no log-probs unless the caller needs them
        (``SamplingParams.logprobs``; ``train.old_logprobs`` decides), flat log-probs when it does (a few
        lists per request instead of a dict + Logprob object per token) and, when no stop string needs
        the text, no incremental detokenization (we decode the finished ids once ourselves)."""
        return {"logprobs": 0 if params.logprobs else None, "flat_logprobs": params.logprobs,
                "detokenize": bool(params.stop)}

    # -- the Generator protocol ---------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams, use_adapter: bool = True) -> list[Completion]:
        if not use_adapter and not hasattr(self.model, "peft_config"):
            raise ValueError("use_adapter=False (the frozen base: judge or reference) needs a LoRA policy "
                             "(model.lora.r > 0); a full fine-tune has no frozen base inside the policy")
        if not prompts:
            return []
        from vllm import SamplingParams as VSP

        # The frozen base swaps the base weights in for this call; the next policy call pushes the
        # policy back (two pushes per step where a judge plays, each ~0.05 s on a 321M model).
        if self.needs_sync(use_adapter):
            self.sync_weights(use_adapter)
        self._wake()
        vsp = VSP(n=1, temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_new_tokens,
                  min_tokens=min(params.min_new_tokens, params.max_new_tokens), stop=list(params.stop) or None,
                  stop_token_ids=sorted(self.eos_ids), include_stop_str_in_output=True,
                  skip_special_tokens=True, **self._fast_output(params))
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], vsp, use_tqdm=False)
        if self.sleep:  # hand the KV cache (and the weights, to CPU) back to the update pass
            self.llm.sleep(level=1)
            self._asleep = True
        result = []
        for p, o in zip(prompts, outs):
            c = _completion_of(o.outputs[0], params, self.tokenizer, self.eos_ids)
            c.prompt_ids = list(p)
            result.append(c)
        return result
