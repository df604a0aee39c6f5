"""DeepSpeed ZeRO behind the trainer's ``Engine`` interface (``train.engine: deepspeed``).

- ZeRO stage 1, 2 or 3 (``train.zero_stage``), bf16 weights with fp32 master weights and fp32
  Adam states, global-norm clipping, the same warmup-then-constant schedule as TorchEngine.
- AdamW is torch's (``"torch_adam": true``): no JIT-compiled DeepSpeed op is needed, so the
  wheel built with ``DS_BUILD_OPS=0`` is enough. ``offload_optimizer=True`` keeps the fp32
  master weights and Adam states in CPU memory (torch AdamW steps them there).
- Gradient accumulation is ours, not DeepSpeed's: the engine runs with
  ``managed_gradient_accumulation: false``, so ``backward()`` only accumulates (the update pass
  already scales each micro-batch loss by its share of the step) and ``step()`` is the one
  accumulation boundary (reduce, clip, AdamW, schedule). A micro-batch count that changes
  from step to step (ragged RL batches, packing) is fine.
- Checkpoints resume on ANY number of GPUs: ``state_dict()`` gathers the full fp32 master
  weights and Adam moments per parameter NAME (a collective: every rank calls it; rank 0 keeps
  the tensors, on CPU), and ``load_state_dict()`` scatters them into whatever partitioning the
  new run has (and refreshes the bf16 weights the model computes with).
- ZeRO-3 partitions the weights: ``gathered()`` is a context that materialises them (for fast
  generation or saving), ``model_state_dict()`` returns consolidated 16-bit weights.

``ds_config(...)`` builds the DeepSpeed config dict; it is pure and tested without DeepSpeed.
"""
from __future__ import annotations

import contextlib

import torch

from trainer.distributed import init_process_group, is_main, world_size
from trainer.engine.torch_engine import warmup_constant

ADAM_KEYS = ("exp_avg", "exp_avg_sq")
FORMAT = "selfplay-deepspeed-consolidated-v1"


def ds_config(*, zero_stage: int = 2, lr: float = 1e-6, betas=(0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.0, grad_clip: float = 1.0, bf16: bool = True,
              offload_optimizer: bool = False, offload_params: bool = False,
              bucket_size: int = 200_000_000) -> dict:
    """The DeepSpeed config for one optimizer step per ``step()`` call."""
    if zero_stage not in (1, 2, 3):
        raise ValueError(f"train.zero_stage must be 1, 2 or 3, got {zero_stage}")
    if offload_params and zero_stage != 3:
        raise ValueError("offload_params needs zero_stage 3 (only ZeRO-3 partitions the weights)")
    zero: dict = {
        "stage": zero_stage,
        # DeepSpeed allows overlap_comm with our own accumulation (managed_gradient_accumulation
        # false) only where gradients are partitioned (stage 2 / 3); stage 1 refused to start with it.
        "overlap_comm": zero_stage >= 2,
        "contiguous_gradients": True,
        "reduce_bucket_size": bucket_size,
        "allgather_bucket_size": bucket_size,
    }
    if zero_stage == 3:
        zero.update({"stage3_gather_16bit_weights_on_model_save": True,
                     "stage3_prefetch_bucket_size": bucket_size // 4,
                     "stage3_param_persistence_threshold": 100_000})
        zero.pop("allgather_bucket_size")
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": float(grad_clip),
        "bf16": {"enabled": bool(bf16)},
        "optimizer": {"type": "AdamW", "params": {
            "lr": float(lr), "betas": [float(b) for b in betas], "eps": float(eps),
            "weight_decay": float(weight_decay), "torch_adam": True, "adam_w_mode": True}},
        "zero_optimization": zero,
        # torch AdamW may step the offloaded fp32 states (no DeepSpeedCPUAdam JIT build needed)
        "zero_force_ds_cpu_optimizer": False,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10 ** 12,
        "wall_clock_breakdown": False,
        # DeepSpeed's throughput timer runs on every forward of the engine's module and, past its second
        # step, calls torch.cuda.synchronize(): a host sync per decode token, and inside a CUDA-graph
        # capture it is not permitted (the capture of the decode step failed at step 3, found on an H100).
        "timers": {"throughput": {"enabled": False}},
    }


class DeepSpeedEngine:
    """One DeepSpeed engine over a (possibly LoRA-wrapped) causal LM."""

    def __init__(self, model: torch.nn.Module, *, lr: float, warmup_steps: int = 0, grad_clip: float = 1.0,
                 weight_decay: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8, zero_stage: int = 2,
                 bf16: bool | None = None, offload_optimizer: bool = False, offload_params: bool = False):
        import deepspeed

        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("no trainable parameters: check model.lora settings")
        if bf16 is None:
            bf16 = torch.cuda.is_available()
        self.config = ds_config(zero_stage=zero_stage, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                grad_clip=grad_clip, bf16=bf16, offload_optimizer=offload_optimizer,
                                offload_params=offload_params)
        init_process_group()
        factor = warmup_constant(warmup_steps)
        self.ds, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=params, config=self.config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, factor))
        self.zero_stage = zero_stage
        self.steps = 0
        self._names = {id(p): n for n, p in self.ds.module.named_parameters()}

    @classmethod
    def from_config(cls, cfg, policy, lr: float | None = None) -> "DeepSpeedEngine":
        t = cfg.train
        return cls(policy.model, lr=t.lr if lr is None else lr, warmup_steps=t.warmup_steps, grad_clip=t.grad_clip,
                   weight_decay=t.weight_decay, betas=(t.adam_beta1, t.adam_beta2), eps=t.adam_eps,
                   zero_stage=t.zero_stage, offload_optimizer=bool(getattr(t, "offload_optimizer", False)))

    # -- the Engine interface ---------------------------------------------------------------
    @property
    def lr(self) -> float:
        return float(self.ds.get_lr()[0])

    @property
    def skipped(self) -> int:
        return int(self.ds.skipped_steps)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate this micro-batch's gradients (the loss is already scaled by its share)."""
        self.ds.backward(loss, scale_wrt_gas=False)
        # DeepSpeedEngine.forward() would do this at the next forward; the update pass calls
        # the module itself, so close this micro-batch here (else ZeRO-3 overwrites instead
        # of accumulating the next micro-batch's gradients).
        clear = getattr(self.ds.optimizer, "clear_backward_seen_flag", None)
        if clear is not None:
            clear()

    def step(self) -> float:
        """Reduce, clip, AdamW step, schedule, zero grads; the pre-clip global grad norm.

        A step with a non-finite norm is skipped by DeepSpeed (bf16 overflow check) and
        reported as nan.
        """
        skipped_before = self.ds.skipped_steps
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        norm = float(norm) if norm is not None else float("nan")
        if self.ds.skipped_steps > skipped_before:
            return float("nan")
        self.steps += 1
        return norm

    def zero_grad(self) -> None:
        self.ds.zero_grad()

    def close(self) -> None:
        """Take DeepSpeed's hooks off the model. They reference the engine, so without this the
        engine, and the process groups it holds, live until the interpreter exits (see
        ``trainer.distributed.shutdown``). The engine is not usable after."""
        self.ds.destroy()

    # -- checkpoints (world-size independent) -------------------------------------------------
    def _trainable(self):
        return [(n, p) for n, p in self.ds.module.named_parameters() if p.requires_grad]

    def state_dict(self) -> dict:
        """Full fp32 weights + Adam moments by parameter name. Collective: call on every rank."""
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

        keep = is_main()
        params: dict = {}
        for name, p in self._trainable():
            entry = {"fp32": safe_get_full_fp32_param(p)}
            for key in ADAM_KEYS:
                entry[key] = safe_get_full_optimizer_state(p, key)
            if keep:
                params[name] = {k: (v.detach().float().cpu().clone() if v is not None else None)
                                for k, v in entry.items()}
        return {"format": FORMAT, "zero_stage": self.zero_stage, "world_size": world_size(),
                "params": params if keep else {}, "adam_step": self._adam_step(),
                "scheduler": self.scheduler.state_dict(), "steps": self.steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        """Scatter a consolidated state into this run's partitioning (any world size)."""
        from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

        if state.get("format") != FORMAT:
            raise ValueError(f"not a DeepSpeed engine checkpoint (format {state.get('format')!r}); "
                             "a train.engine=torch checkpoint cannot resume with train.engine=deepspeed")
        saved = state["params"]
        names = [n for n, _ in self._trainable()]
        missing = [n for n in names if n not in saved]
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} trainable parameter(s), e.g. {missing[:3]}; "
                             "was it saved from a different model or LoRA setting?")
        self._ensure_adam_state()
        for name, p in self._trainable():
            entry = saved[name]
            device = p.device if p.numel() else torch.device("cpu")
            safe_set_full_fp32_param(p, entry["fp32"].to(device))
            for key in ADAM_KEYS:
                if entry.get(key) is not None:
                    safe_set_full_optimizer_state(p, entry[key].to(device), key)
        self._refresh_low_precision(saved)
        self._set_adam_step(int(state.get("adam_step", 0)))
        self.scheduler.load_state_dict(state["scheduler"])
        for group, lr in zip(self._base_optimizer().param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr  # a scheduler's load_state_dict leaves the optimizer's lr as it was
        self.steps = int(state.get("steps", 0))

    def _refresh_low_precision(self, saved: dict) -> None:
        """Copy the restored fp32 weights into the bf16 weights the forward uses."""
        import deepspeed

        for name, p in self._trainable():
            value = saved[name]["fp32"]
            if self.zero_stage == 3:
                with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                    if is_main():
                        p.data.copy_(value.to(p.device, p.dtype).view_as(p))
            else:
                p.data.copy_(value.to(p.device, p.dtype).view_as(p))

    def _base_optimizer(self):
        opt = self.optimizer
        return getattr(opt, "optimizer", opt)

    def _ensure_adam_state(self) -> None:
        """AdamW creates its state at the first step; a fresh engine that resumes needs it now
        (zeros, step 0) so the saved moments have somewhere to go."""
        opt = self._base_optimizer()
        # ZeRO-3 hands its flat fp32 partitions to the optimizer only during step(): use them
        flats = getattr(self.optimizer, "fp32_partitioned_groups_flat", None)
        groups = [(opt.param_groups[0], list(flats))] if flats is not None else \
            [(g, g["params"]) for g in opt.param_groups]
        for group, params in groups:
            on_device = bool(group.get("fused") or group.get("capturable"))
            for p in params:
                st = opt.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device if on_device else "cpu")
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        link = getattr(self.optimizer, "_lazy_init_hp_params_optimizer_state", None)
        if link is not None:  # ZeRO-1/2: point each weight's fragment at the new state
            link()

    def _adam_step(self) -> int:
        for st in self._base_optimizer().state.values():
            if "step" in st:
                return int(st["step"])
        return 0

    def _set_adam_step(self, step: int) -> None:
        for st in self._base_optimizer().state.values():
            if "step" in st:
                st["step"] = torch.as_tensor(float(step), dtype=st["step"].dtype, device=st["step"].device) \
                    if torch.is_tensor(st["step"]) else step

    # -- weights for generation and saving ---------------------------------------------------
    @contextlib.contextmanager
    def gathered(self, hooks: bool = False):
        """Full weights on every rank for the duration (ZeRO-3); a no-op for stages 1-2.

        A collective: every rank enters together. ZeRO-3's per-module fetch/release hooks are
        taken off meanwhile (``hooks=False``), so token-by-token generation runs on plain
        tensors instead of re-gathering at every module call; they are put back after."""
        if self.zero_stage != 3:
            yield
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(self.ds.module.parameters()), modifier_rank=None):
            offload = None if hooks else self._remove_zero3_hooks()
            try:
                yield
            finally:
                if offload is not None:
                    offload._register_deepspeed_module(offload.module)

    def _remove_zero3_hooks(self):
        """Detach ZeRO-3's module hooks; returns the object that re-registers them (or None)."""
        opt = self.ds.optimizer
        offload = getattr(opt, "parameter_offload", None) or opt
        if not (hasattr(offload, "forward_hooks") and hasattr(offload, "_register_deepspeed_module")):
            return None  # another DeepSpeed layout: keep the hooks (slower, still correct)
        for p in offload.module.parameters():
            getattr(p, "ds_active_sub_modules", set()).clear()
        for hook in [*offload.forward_hooks, *offload.backward_hooks]:
            hook.remove()
        offload.forward_hooks, offload.backward_hooks = [], []
        return offload

    def model_state_dict(self) -> dict:
        """Consolidated 16-bit weights (collective under ZeRO-3; full on rank 0)."""
        if self.zero_stage == 3:
            return self.ds._zero3_consolidated_16bit_state_dict()
        return {k: v.detach().cpu() for k, v in self.ds.module.state_dict().items()}
