"""Where the update pass's time goes (issue "GPU": update MFU), on the 1.39B Llama shape of
``bench_update_mfu.py``, in one process:

1. ``anchor``: plain transformers, bf16 weights, ``model(input_ids, labels=...)`` + fused AdamW on
   the dense 8 x 2048 batch (shared/specs/gpu.md's anchor: 50% MFU on an H200). It bounds what
   this card gives the model's own kernels.
2. ``ours``: ``trainer.update.policy_update`` (the engine / packing / token budget given) on the
   ragged RL-like batch, timed, then one more step under ``torch.profiler``: GPU kernel time by
   category (matmul, attention, optimizer, copies/casts, other elementwise/reductions), the GPU's
   busy share of the step's wall time, and the top kernels.

    python benchmarks/gpu/profile_update.py [--engine deepspeed] [--zero 2] [--tokens 8192] [--reps 3] [--compile]
"""
from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict

import torch

from bench_update_mfu import build, dense_samples, prompt_file, ragged_samples
from common import DEVICE, SMOKE, emit, llama_config, matmul_tflops, median, peak_mem_gb, reset_peak, sync, \
    tokenizer, train_flops

CATEGORIES = [  # first match wins (kernel names of cuBLAS / cutlass / flash / torch)
    ("attention", re.compile(r"flash|fmha|attention", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|matmul|wgmma", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach|fused_optim", re.I)),
    ("copy_cast", re.compile(r"copy|cast|memcpy|memset|to_copy|convert", re.I)),
    ("softmax_ce", re.compile(r"softmax|logsumexp|cross_entropy|nll", re.I)),
]


def category(name: str) -> str:
    for cat, pattern in CATEGORIES:
        if pattern.search(name):
            return cat
    return "elementwise_other"


def anchor(reps: int, peak: float) -> None:
    """Plain bf16 transformers training step on 8 x 2048 dense tokens (the spec's anchor)."""
    from transformers import LlamaForCausalLM

    tok = tokenizer()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(llama_config("llama-1.5b", tok)).to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=DEVICE == "cuda")
    rows, length = (2, 256) if SMOKE else (8, 2048)
    ids = torch.randint(100, model.config.vocab_size, (rows, length), device=DEVICE)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    t = median(times)
    flops = train_flops(model.config, [length] * rows)
    emit("profile_anchor", {"what": "plain transformers bf16 + fused AdamW, dense 8x2048", "step_s": round(t, 4),
                            "mfu_vs_measured": flops / t / 1e12 / peak, "peak_mem_gb": peak_mem_gb()})
    del model, opt
    torch.cuda.empty_cache() if DEVICE == "cuda" else None


def profile_step(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    sync()
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        fn()
        sync()
    wall = time.perf_counter() - t0
    by_cat: dict[str, float] = defaultdict(float)
    kernels: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for evt in prof.events():
        if evt.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
        by_cat[category(evt.name)] += us
        kernels[evt.name] += us
        counts[evt.name] += 1
    busy = sum(by_cat.values()) / 1e6
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:12]
    return {"wall_s": round(wall, 4), "gpu_kernel_s": round(busy, 4), "gpu_busy_share": round(busy / wall, 3),
            "by_category_s": {k: round(v / 1e6, 4) for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
            "kernels": sum(counts.values()),
            "top": [{"name": n[:140], "s": round(v / 1e6, 4), "n": counts[n]} for n, v in top]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="deepspeed", choices=["torch", "deepspeed"])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--zero", type=int, default=2, choices=[1, 2, 3])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-anchor", action="store_true")
    ap.add_argument("--compile", action="store_true", help="model.compile (regional torch.compile)")
    args = ap.parse_args()

    from trainer.update import policy_update

    peak = matmul_tflops()
    if not args.no_anchor:
        anchor(args.reps, peak)
    base = {"method": "grpo", "data": {"path": prompt_file("/tmp/bench_prompts.jsonl")},
            "model": {"dtype": "auto", "attn_implementation": "sdpa", **({"compile": True} if args.compile else {})},
            "rollout": {"max_new_tokens": 2048, "temperature": 1.0},
            "train": {"device": DEVICE, "lr": 1e-6, "engine": args.engine, "zero_stage": args.zero, "micro_batch_size": 4,
                      "share_prompt_prefix": False, "skip_zero_advantage": False, "packing": True,
                      "micro_batch_tokens": args.tokens}}
    cfg, policy, engine = build(base)
    samples = ragged_samples(8 if SMOKE else 64, policy.model.config.vocab_size)
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    flops = train_flops(policy.model.config, lengths)
    t0 = time.perf_counter()
    policy_update(policy, engine, samples, cfg)  # warm-up (and compile, if on)
    sync()
    warm = time.perf_counter() - t0
    reset_peak()
    times = []
    for _ in range(args.reps):
        sync()
        t0 = time.perf_counter()
        policy_update(policy, engine, samples, cfg)
        sync()
        times.append(time.perf_counter() - t0)
    t = median(times)
    prof = profile_step(lambda: policy_update(policy, engine, samples, cfg))
    emit("profile_update", {"engine": args.engine, "zero_stage": args.zero, "micro_batch_tokens": args.tokens, "compile": args.compile,
                            "warmup_s": round(warm, 2), "step_s": round(t, 4), "times": [round(x, 4) for x in times],
                            "real_tokens": sum(lengths), "mfu_vs_measured": flops / t / 1e12 / peak,
                            "peak_matmul_tflops": peak, "peak_mem_gb": peak_mem_gb(), **prof})


if __name__ == "__main__":
    main()
