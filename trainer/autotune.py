"""What ``auto`` picks for the update's speed settings, as pure rules (no torch, no probing).

``train.engine``, ``train.packing`` and ``train.share_prompt_prefix`` default to ``auto``; the
update pass, the engine factory and the run's start resolve them with the rules below, and
``trainer.run`` writes what was picked, and why, as one event of the run (``auto_settings``):

- **engine** (``pick_engine``): DeepSpeed ZeRO (``train.zero_stage``, 2 by default) when the
  run trains on a GPU and ``deepspeed`` can be imported; otherwise plain torch AdamW. ZeRO-3 is
  not picked with LoRA or ``model.compile`` (neither works there): those get torch. Measured on
  an H100 (benchmarks/RESULTS.md, 321M GRPO step): torch 3.27 s, ZeRO-2 + packing 1.64 s.
- **packing** (``pick_packing``): on a GPU (one packed row per micro-batch, varlen flash
  attention, no pad token computed); off on a CPU, where packed attention runs one SDPA call per
  sequence and padded micro-batches of sorted samples are as fast.
- **share_prompt_prefix** (``share_pays``): decided for each group of samples with one prompt,
  at every update. Sharing runs the prompt once per micro-batch and the completions against its
  cached keys/values; it saves the prompt's repeats but the completions then run padded against a
  cache (no packing, a masked attention kernel), which costs more per token. So a group shares
  when it cuts the tokens through the model by at least ``SHARE_MIN_GAIN`` for the device::

      gain = sum_i (P + C_i) / sum_chunks (P + n_chunk * max C in chunk)  >=  SHARE_MIN_GAIN

  (P prompt tokens, C_i completion tokens, chunks of ``train.micro_batch_size`` samples, each
  running the prompt once). For G = 8 and 256-token completions: a 40-token prompt (the 321M GRPO
  benchmark) gains 1.13x and does not share; a 700-token SPICE Challenger prompt (a 512-token
  document) gains 2.8x, below the GPU's measured 4.26, and is packed instead; a 6,000-token document
  shares; a 100-token GSM8K prompt with 64-token completions
  (the CPU benchmark) gains 2.1x and shares on a CPU.

``benchmarks/gpu/bench_share_crossover.py`` measures the update with and without sharing over a
grid of prompt length x group size and prints the gain at the crossover: the value for
``SHARE_MIN_GAIN["cuda"]``.

- **micro_batch_tokens** (``pick_micro_batch_tokens``): the packed micro-batch's token budget. The
  update's activations grow with tokens x width x depth, roughly with the parameter count, so the
  budget that fit a 0.5B model on an 80 GB GPU is scaled down with the parameters and up with the
  GPU's memory, rounded down to a power of two within [1,024, 16,384]: Qwen2.5-0.5B on an H100 16,384
  (ran), Qwen2.5-1.5B on an H100 4,096 (16,384 and 8,192 ran out of memory before the logits were
  chunked, 2,048 ran; on an H200 4,096 ran), on an H200 8,192 (not run), a 7B 1,024.
- **overlap** (``pick_overlap``): ``train.overlap: one_step`` samples the next step's batch while this step's
  update runs (trainer/overlap.py). auto turns it on only where the two halves can share the machine: a GPU
  (the rollout on its own CUDA stream fills what the update leaves idle; on a CPU both halves want the same
  cores, so it stays off), a method that supports it, the hf backend, one GPU, no ZeRO-3 and no rollout PPO
  reference set in the config, at least ``OVERLAP_MIN_ROWS`` sequences a step (a tiny batch's rollout is
  a few milliseconds of kernel launches: the thread, the weight copy and the stale batch would buy nothing), and
  weights small beside the GPU (at most ``OVERLAP_MAX_WEIGHT_SHARE`` of its memory: the snapshot is one more copy,
  and the rollout's KV cache then shares the GPU with the update's activations).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

# Token-count gain a group's shared prompt must bring before it is shared, per device type.
# cuda: measured on an H100 (bench_share_crossover.py, 321M Llama, ZeRO-2, 256-token completions,
# 2026-11-26, benchmarks/RESULTS.md): sharing was slower at gains 1.13 (3.9x slower), 3.0, 3.33 and 3.4
# (0.70x / 0.90x / 0.98x) and faster at 4.5 (1.27x with G=8, 1.06x with G=16) and 5.67 (2.4x / 1.9x);
# interpolated crossovers: gain 3.67 (G=8, prompt ~1,270 tokens) and 4.26 (G=16, ~1,780). The threshold
# is the larger, so a shared prompt is never the slower path on the measured grid.
# cpu: measured here (bench_share_crossover.py, SmolLM2-135M shape, G=8, 64-token completions,
# 2-core box under load ~10): sharing was faster at every measured length, 1.38x / 1.28x / 1.24x /
# 3.93x at gains 1.21 / 1.78 / 2.4 / 3.33 (prompts 16 / 64 / 128 / 256); the threshold sits just
# below the smallest gain measured to pay.
SHARE_MIN_GAIN = {"cuda": 4.26, "cpu": 1.2}
_OTHER_DEVICE_GAIN = SHARE_MIN_GAIN["cuda"]  # an accelerator without its own measurement


def share_gain(prompt_len: int, completion_lens: Sequence[int], micro_batch_size: int) -> float:
    """How many times fewer tokens a group runs through the model when its prompt is shared.

    Unshared: every sample runs prompt + completion (packed or padded by length). Shared: the
    group runs in chunks of ``micro_batch_size`` samples, longest first (as the update plans
    them); each chunk runs the prompt once and its completions padded to the chunk's longest.
    share_gain(40, [256] * 8, 8) = 8 * 296 / (40 + 8 * 256) = 1.13.
    """
    if prompt_len < 0 or micro_batch_size < 1 or any(c < 0 for c in completion_lens):
        raise ValueError("share_gain needs prompt_len >= 0, completion lengths >= 0 and micro_batch_size >= 1")
    if not completion_lens:
        return 1.0
    unshared = sum(prompt_len + c for c in completion_lens)
    ordered = sorted(completion_lens, reverse=True)
    shared = 0
    for i in range(0, len(ordered), micro_batch_size):
        chunk = ordered[i : i + micro_batch_size]
        shared += prompt_len + len(chunk) * chunk[0]
    return unshared / max(shared, 1)


def min_share_gain(device_type: str) -> float:
    return SHARE_MIN_GAIN.get(device_type, _OTHER_DEVICE_GAIN)


def share_pays(prompt_len: int, completion_lens: Sequence[int], micro_batch_size: int, device_type: str) -> bool:
    """The ``auto`` rule of ``train.share_prompt_prefix`` for one group (samples of one prompt)."""
    if len(completion_lens) < 2:
        return False
    return share_gain(prompt_len, completion_lens, micro_batch_size) >= min_share_gain(device_type)


# micro_batch_tokens: auto. The reference: full fine-tune (fp32 master weights, AdamW, bf16 autocast, no gradient
# checkpointing) of Qwen2.5-Coder-0.5B-Instruct (494M parameters) at 16,384 tokens on one 80 GB H100, 2026-11-26
# (benchmarks/RESULTS.md, "Learning on the GPU"); Qwen2.5-Coder-1.5B (1.54B) OOMed there at 16,384 and 8,192.
MICRO_BATCH_TOKENS_REF = 16384
MICRO_BATCH_PARAMS_REF = 0.5e9
MICRO_BATCH_MEMORY_REF = 80e9  # bytes: an H100 80GB reports 85.5e9 total (79.6 GiB)
MICRO_BATCH_TOKENS_RANGE = (1024, 16384)


def pick_micro_batch_tokens(requested, n_params: int, gpu_memory_bytes: int | None) -> int:
    """``train.micro_batch_tokens``: as set, or for ``auto`` 16,384 x (0.5B / parameters) x (GPU memory / 80 GB),
    a power of two within MICRO_BATCH_TOKENS_RANGE; 16,384 without a GPU (packing is off on a CPU by default).
    pick(auto, 494M, 85.5e9) = 16,384; pick(auto, 1.54B, 85.5e9) = 4,096; pick(auto, 1.54B, 150.7e9) = 8,192."""
    if requested != "auto":
        return int(requested)
    lo, hi = MICRO_BATCH_TOKENS_RANGE
    if not gpu_memory_bytes:
        return hi
    raw = (MICRO_BATCH_TOKENS_REF * (MICRO_BATCH_PARAMS_REF / max(n_params, 1))
           * (gpu_memory_bytes / MICRO_BATCH_MEMORY_REF))
    return max(lo, min(hi, 1 << int(math.floor(math.log2(max(raw, 1.0))))))


def pick_packing(requested, device_type: str) -> bool:
    """``train.packing``: True/False as given; auto = on a GPU only."""
    if requested == "auto":
        return device_type == "cuda"
    return bool(requested)


def pick_engine(requested: str, device_type: str, deepspeed_importable: bool, *, zero_stage: int = 2,
                lora: bool = False, compiled: bool = False) -> str:
    """``train.engine``: as given; auto = deepspeed on a GPU where it imports (not ZeRO-3 with LoRA
    or model.compile, which it cannot run), else torch."""
    if requested != "auto":
        return requested
    if device_type != "cuda" or not deepspeed_importable:
        return "torch"
    if zero_stage == 3 and (lora or compiled):
        return "torch"
    return "deepspeed"


def engine_reason(requested: str, device_type: str, deepspeed_importable: bool, picked: str) -> str:
    if requested != "auto":
        return "set in the config"
    if picked == "deepspeed":
        return "a GPU and deepspeed are present"
    if device_type != "cuda":
        return "no GPU (DeepSpeed is for GPUs)"
    if not deepspeed_importable:
        return "deepspeed is not installed (pip install -e .[gpu])"
    return "ZeRO-3 cannot run LoRA or model.compile"


# overlap: auto. Sequences a step (train.prompts_per_step x rollout.group_size) from which a GPU run overlaps its
# rollout with its update: the 321M GRPO benchmark's shape (8 prompts x 8), where one_step was measured at 0.84x of
# the plain step (H200, 2026-11-28, benchmarks/gpu/bench_overlap.py: 1.16 s vs 1.38 s; 0.80-0.86x at 256 and 0.85x
# at 512 sequences). Fewer sequences were not measured.
OVERLAP_MIN_ROWS = 64
# The snapshot's weights may take at most this share of the GPU's memory under auto (0.5B in float32: 2 GB of an
# 80 GB H100, 2.5%; 1.5B: 7.7%; 7B: 35%, off). Ours, not measured.
OVERLAP_MAX_WEIGHT_SHARE = 0.1
# Share of the GPU memory free when the overlap starts (weights and optimizer loaded) that the overlapped rollout's
# KV cache may take: it decodes while the update holds its activations, so not the 0.6 of the memory free at call
# time that a rollout alone gets (trainer/rollout/hf.py KV_BUDGET_FRACTION); a bigger batch decodes in chunks.
OVERLAP_KV_FRACTION = 0.25
OVERLAP_IS_CAP = 2.0  # the behaviour weight's cap under overlap when train.rollout_is_cap is 0
# Whether one_step has been measured faster than the plain step on a GPU: yes (see OVERLAP_MIN_ROWS above).
OVERLAP_FASTER_ON_GPU = True
# Whether a run with one_step has been shown to reach the plain step's held-out accuracy (the GRPO GSM8K run of
# benchmarks/RESULTS.md with and without it, within seed noise). Not yet: until then auto leaves it off everywhere,
# the shipped default stays the plain step whose learning is measured, and one_step is an opt-in.
OVERLAP_LEARNS_AS_WELL = False


def pick_overlap(requested: str, *, supported: bool, device_type: str, rows: int, backend: str = "hf",
                 gpus: int = 1, zero_stage: int | None = None, old_logprobs: str = "auto",
                 weight_bytes: int = 0, gpu_memory_bytes: int | None = None) -> tuple[bool, str]:
    """``train.overlap``: (on, why). one_step / off as set; auto = on only for a method that supports it, on a GPU,
    with the hf backend, one GPU, no ZeRO-3, no rollout PPO reference set, >= OVERLAP_MIN_ROWS sequences a step and
    trained weights of at most OVERLAP_MAX_WEIGHT_SHARE of the GPU's memory (when it is known).
    pick_overlap("auto", supported=True, device_type="cuda", rows=64) = (True, ...); rows=32 -> off; "cpu" -> off;
    and off wherever it would be on while OVERLAP_LEARNS_AS_WELL is False (no held-out comparison yet)."""
    if requested != "auto":
        return requested == "one_step", "set in the config"
    if not supported:
        return False, "the method does not overlap its rollout (grpo does)"
    if device_type != "cuda":
        return False, "no GPU (on a CPU generation and update want the same cores)"
    if backend != "hf":
        return False, f"rollout.backend={backend} (one_step is built for the hf backend)"
    if gpus > 1:
        return False, "several GPUs (one_step runs on one)"
    if zero_stage == 3:
        return False, "ZeRO-3 partitions the weights one_step copies"
    if old_logprobs == "rollout":
        return False, "train.old_logprobs=rollout (a stale rollout cannot be the PPO reference)"
    if rows < OVERLAP_MIN_ROWS:
        return False, f"{rows} sequences a step, under {OVERLAP_MIN_ROWS} (too little to overlap)"
    if gpu_memory_bytes and weight_bytes > OVERLAP_MAX_WEIGHT_SHARE * gpu_memory_bytes:
        return False, (f"the weights ({weight_bytes / 2**30:.1f} GiB) are over {OVERLAP_MAX_WEIGHT_SHARE:.0%} of the "
                       "GPU's memory (a second copy would crowd the update)")
    if not (OVERLAP_FASTER_ON_GPU and OVERLAP_LEARNS_AS_WELL):
        if not OVERLAP_FASTER_ON_GPU:
            return False, ("not yet measured faster than the plain step on a GPU (benchmarks/gpu/bench_overlap.py); "
                           "train.overlap: one_step turns it on")
        return False, ("measured faster on a GPU (0.84x of the plain step at 64 sequences, H200) but not yet shown to "
                       "reach the plain step's held-out accuracy; train.overlap: one_step turns it on")
    return True, f"a GPU and {rows} sequences a step (>= {OVERLAP_MIN_ROWS})"


def overlap_is_cap(rollout_is_cap: float) -> float:
    """The cap of the behaviour weight min(pi_trainer / pi_sampled, cap) under overlap: train.rollout_is_cap, or
    OVERLAP_IS_CAP where that is 0."""
    return rollout_is_cap if rollout_is_cap > 0 else OVERLAP_IS_CAP


def describe(train, device_type: str, engine: str, deepspeed_importable: bool,
             compiled: bool = False, n_params: int = 0, gpu_memory_bytes: int | None = None,
             overlap: tuple[bool, str] | None = None) -> tuple[str, dict]:
    """The ``auto_settings`` event of a run: a sentence and the data (what each setting became)."""
    packing = pick_packing(train.packing, device_type)
    tokens = pick_micro_batch_tokens(train.micro_batch_tokens, n_params, gpu_memory_bytes)
    share = train.share_prompt_prefix
    if compiled:
        share_text, share_value = "off (model.compile packs or pads groups)", False
    elif share == "auto":
        gain = min_share_gain(device_type)
        share_text, share_value = f"per group, where it cuts the group's tokens by >= {gain:g}x", "auto"
    else:
        share_text, share_value = ("on" if share else "off") + " (set in the config)", bool(share)
    data = {"device": device_type, "engine": engine,
            "engine_reason": engine_reason(train.engine, device_type, deepspeed_importable, engine),
            "zero_stage": train.zero_stage if engine == "deepspeed" else None,
            "packing": packing, "packing_reason": "set in the config" if train.packing != "auto"
            else ("GPU: varlen attention" if packing else "CPU: padded micro-batches"),
            "share_prompt_prefix": share_value, "share_min_gain": min_share_gain(device_type),
            "micro_batch_tokens": tokens if packing else None,
            "requested": {"engine": train.engine, "packing": train.packing,
                          "share_prompt_prefix": train.share_prompt_prefix,
                          "micro_batch_tokens": train.micro_batch_tokens,
                          "overlap": getattr(train, "overlap", "off")}}
    if overlap is not None:
        data["overlap"], data["overlap_reason"] = ("one_step" if overlap[0] else "off"), overlap[1]
    engine_text = engine + (f" ZeRO-{train.zero_stage}" if engine == "deepspeed" else "")
    message = (f"speed settings on {device_type}: engine {engine_text} ({data['engine_reason']}); "
               f"packing {'on' if packing else 'off'} ({data['packing_reason']}"
               + (f"; {tokens} tokens a micro-batch" if packing else "") + "); "
               f"shared prompt {share_text}"
               + (f"; overlap {data['overlap']} ({data['overlap_reason']})" if overlap is not None else ""))
    return message, data
