"""Where sharing a group's prompt starts to pay in the update (``train.share_prompt_prefix``),
to set ``SHARE_MIN_GAIN`` of trainer/autotune.py (the ``auto`` rule).

A random-init Llama of ``--shape`` (the 321M GRPO-benchmark model by default) on the GPU. For
every cell of a grid of prompt length P x group size G, a batch of ``--groups`` groups (one random
prompt each, G completions of ``--completion`` tokens, every token trained, advantages +-1) goes
through ``trainer.update.policy_update`` twice: shared (``share_prompt_prefix: true``) and not
(``false``; packed on a GPU, as ``packing: auto`` does there), with the engine ``auto`` picks
(DeepSpeed ZeRO-2 on a GPU where it imports) and the shipped micro-batch settings. Each timing
is the median of ``--reps`` after one warm-up update; the optimizer step is included.

Prints a RESULT line per cell (both times, shared speedup, the rule's token gain and decision),
per G the crossover (the prompt length from which sharing is faster, interpolated in log P)
and the token gain there, and a SUGGEST line: the value for ``SHARE_MIN_GAIN[device]``. Cells
run small prompts first (every G gets them), and stop at ``--budget-s`` (about 3 minutes on an
H100 with the defaults).

    python benchmarks/gpu/bench_share_crossover.py [--shape llama-321m] [--prompts 32,64,...]
        [--group-sizes 4,8,16] [--completion 256] [--groups 2] [--reps 2] [--engine auto]
    python benchmarks/gpu/bench_share_crossover.py --smoke   # CPU, tiny model: checks the script
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

if "--smoke" in sys.argv:
    os.environ["SMOKE"] = "1"  # common.py shrinks the shapes at import

import torch  # noqa: E402

from common import DEVICE, SHAPES, SMOKE, emit, median, peak_mem_gb, reset_peak, sync  # noqa: E402

VOCAB = 49152  # SmolLM2's tokenizer (the benchmark models' vocabulary); ids are random anyway


def build(shape: str, engine: str, micro: int, tokens: int, completion: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.config import load_config
    from trainer.engine import make_engine, resolved_engine
    from trainer.models import Policy

    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, max_position_embeddings=8192, rope_theta=100000.0,
                                             **SHAPES[shape]))  # float32 master weights
    model.config._attn_implementation = "sdpa"
    policy = Policy(model=model, tokenizer=None, device=torch.device(DEVICE), path=None,
                    autocast_dtype=torch.bfloat16 if DEVICE == "cuda" else None)

    def cfg(share: bool):
        return load_config({"method": "grpo", "data": {"path": "-"},
                            "rollout": {"max_new_tokens": completion, "temperature": 1.0},
                            "train": {"device": DEVICE, "lr": 1e-7, "engine": engine, "micro_batch_size": micro,
                                      "micro_batch_tokens": tokens, "share_prompt_prefix": share,
                                      "skip_zero_advantage": False}})

    shared, unshared = cfg(True), cfg(False)
    return policy, make_engine(shared, policy), shared, unshared, resolved_engine(shared, DEVICE)


def batch(groups: int, group_size: int, prompt: int, completion: int, seed: int):
    from trainer.update import Sample

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(groups):
        p = torch.randint(100, VOCAB, (prompt,), generator=g).tolist()
        for i in range(group_size):
            c = torch.randint(100, VOCAB, (completion,), generator=g).tolist()
            out.append(Sample(p, c, [1] * completion, [-2.0] * completion, advantage=(-1.0) ** i, temperature=1.0))
    return out


def time_update(policy, engine, samples, cfg, reps: int) -> float:
    from trainer.update import policy_update

    policy_update(policy, engine, samples, cfg)  # warm-up (allocator, kernels)
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        policy_update(policy, engine, samples, cfg)
        sync()
        times.append(time.perf_counter() - t0)
    return median(times)


def crossover(cells: list[dict]) -> tuple[float | None, str]:
    """The prompt length where shared and unshared take the same time (log-P interpolation of
    log speedup between the last losing and the first winning length), and how it was found."""
    cells = sorted((c for c in cells if c.get("speedup")), key=lambda c: c["prompt"])
    if not cells:
        return None, "no cells"
    if cells[0]["speedup"] >= 1:
        return float(cells[0]["prompt"]), "shared is faster at every measured length (crossover at or below)"
    for lo, hi in zip(cells, cells[1:]):
        if lo["speedup"] < 1 <= hi["speedup"]:
            a, b = math.log(lo["speedup"]), math.log(hi["speedup"])
            x = math.log(lo["prompt"]) + (0 - a) / (b - a) * (math.log(hi["prompt"]) - math.log(lo["prompt"]))
            return math.exp(x), "interpolated"
    return None, f"shared is slower at every measured length (crossover above {cells[-1]['prompt']})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama-321m", choices=sorted(SHAPES))
    ap.add_argument("--prompts", default="16,64,256" if SMOKE else "32,64,128,256,512,1024,2048,4096",
                    help="prompt lengths P (comma list)")
    ap.add_argument("--group-sizes", default="2,4" if SMOKE else "4,8,16", help="group sizes G (comma list)")
    ap.add_argument("--completion", type=int, default=16 if SMOKE else 256, help="tokens per completion (all trained)")
    ap.add_argument("--groups", type=int, default=2, help="groups per update")
    ap.add_argument("--reps", type=int, default=1 if SMOKE else 2)
    ap.add_argument("--micro", type=int, default=8, help="train.micro_batch_size (the shipped default)")
    ap.add_argument("--tokens", type=int, default=16384, help="train.micro_batch_tokens (the shipped default)")
    ap.add_argument("--engine", default="auto", choices=["auto", "torch", "deepspeed"])
    ap.add_argument("--budget-s", type=float, default=170.0, help="stop starting cells after this many seconds")
    ap.add_argument("--threads", type=int, default=1 if SMOKE else 0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU (checks the script; measures nothing)")
    args = ap.parse_args()

    from trainer import autotune

    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    prompts = [int(x) for x in args.prompts.split(",")]
    sizes = [int(x) for x in args.group_sizes.split(",")]
    policy, engine, shared_cfg, unshared_cfg, engine_name = build(
        args.shape, args.engine, args.micro, args.tokens, args.completion)
    packing = autotune.pick_packing("auto", DEVICE)
    device_type = torch.device(DEVICE).type
    threshold = autotune.min_share_gain(device_type)
    print(f"# {args.shape} on {DEVICE}, engine {engine_name}, unshared packed={packing}, C={args.completion}, "
          f"{args.groups} groups/update, micro {args.micro}, rule threshold {threshold}", flush=True)
    cells: list[dict] = []
    skipped = []
    for prompt in prompts:
        for size in sizes:
            if time.perf_counter() - start > args.budget_s:
                skipped.append((prompt, size))
                continue
            samples = batch(args.groups, size, prompt, args.completion, seed=prompt * 31 + size)
            gain = autotune.share_gain(prompt, [args.completion] * size, args.micro)
            row = {"shape": args.shape, "prompt": prompt, "group_size": size, "completion": args.completion,
                   "groups": args.groups, "engine": engine_name, "packed_unshared": packing, "token_gain": round(gain, 3),
                   "rule_shares": autotune.share_pays(prompt, [args.completion] * size, args.micro, device_type)}
            try:
                reset_peak()
                row["shared_s"] = time_update(policy, engine, samples, shared_cfg, args.reps)
                row["unshared_s"] = time_update(policy, engine, samples, unshared_cfg, args.reps)
                row["speedup"] = row["unshared_s"] / row["shared_s"]  # > 1: sharing is faster
                row["peak_mem_gb"] = peak_mem_gb()
                best = min(row["shared_s"], row["unshared_s"])
                row["rule_over_best"] = (row["shared_s"] if row["rule_shares"] else row["unshared_s"]) / best
            except torch.cuda.OutOfMemoryError:
                row["error"] = "out of GPU memory"
                torch.cuda.empty_cache()
            cells.append(emit("share_crossover", row))

    gains, below = [], []  # gains at interpolated crossovers; upper bounds where sharing always won
    for size in sizes:
        found, how = crossover([c for c in cells if c["group_size"] == size])
        at_gain = autotune.share_gain(found, [args.completion] * size, args.micro) if found else None
        if at_gain and how == "interpolated":
            gains.append(at_gain)
        elif at_gain:
            below.append(at_gain)
        emit("share_crossover_summary", {"shape": args.shape, "group_size": size, "completion": args.completion,
                                         "crossover_prompt": round(found, 1) if found else None, "how": how,
                                         "token_gain_at_crossover": round(at_gain, 3) if at_gain else None})
    timed = [c for c in cells if "rule_over_best" in c]
    worst = max(timed, key=lambda c: c["rule_over_best"]) if timed else None
    verdict = {"device_type": device_type, "current_threshold": threshold,
               "suggested_threshold": round(median(gains), 2) if gains else None,
               "rule_picks_faster": sum(c["rule_over_best"] == 1.0 for c in timed), "cells": len(timed),
               "worst_rule_over_best": round(worst["rule_over_best"], 3) if worst else None,
               "worst_cell": {k: worst[k] for k in ("prompt", "group_size")} if worst else None,
               "skipped_cells_over_budget": skipped, "wall_s": round(time.perf_counter() - start, 1)}
    emit("share_crossover_verdict", verdict)
    if gains:
        print(f"SUGGEST trainer/autotune.py SHARE_MIN_GAIN[{device_type!r}] = {median(gains):.2f} "
              f"(token gain at the crossover, median over group sizes {sizes}; now {threshold})", flush=True)
    elif below:
        print(f"SUGGEST trainer/autotune.py SHARE_MIN_GAIN[{device_type!r}] <= {min(below):.2f} (sharing was faster "
              f"at every measured length; now {threshold}); add shorter --prompts to find the crossover", flush=True)
    else:
        print("SUGGEST none: sharing was slower everywhere in the grid (see the summary lines); add longer --prompts",
              flush=True)


if __name__ == "__main__":
    main()
