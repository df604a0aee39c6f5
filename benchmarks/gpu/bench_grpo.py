"""GRPO step time of OUR trainer (``trainer.run``) on the 321M Llama, as the issue specifies:
8 prompts x 8 completions x 256 new tokens forced (min_new_tokens = max_new_tokens), bf16.

    python benchmarks/gpu/bench_grpo.py        # the shipped defaults: what a user gets without flags
    python benchmarks/gpu/bench_grpo.py --engine torch|deepspeed [--zero 2] [--backend hf|vllm]
        [--steps 5] [--packing|--no-packing] [--no-share] [--cuda-graphs auto|on|off] [--tag NAME]

Every flag left out keeps the trainer's own default (``auto`` for engine, packing and prompt sharing:
trainer/autotune.py); a flag given forces that setting.

The first step is warm-up; the median of the rest is reported (with generation and update
seconds from the recipe's own metrics). The reward is ``exact`` (cheap), as a benchmark of
the trainer, not of the verifier. Prints and appends one RESULT line to $OUT/results.jsonl.
"""
from __future__ import annotations

import argparse
import json
import time

from common import DEVICE, SMOKE, emit, make_model_dir, median, peak_mem_gb, reset_peak

TOKENS = 8 if SMOKE else 256  # new tokens per completion (forced)

PROMPTS = [
    "What is 17 + 25? Answer with a number.",
    "Name the capital of France.",
    "A train travels 60 km in 45 minutes. What is its speed in km/h?",
    "Write the word 'cat' backwards.",
    "What is the square root of 144?",
    "If x + 3 = 10, what is x?",
    "How many legs do three spiders have?",
    "What is 9 times 8?",
]


def prompt_file(path) -> str:
    with open(path, "w") as f:
        for i, p in enumerate(PROMPTS):
            f.write(json.dumps({"prompt": p, "answer": str(i)}) + "\n")
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["torch", "deepspeed"], help="default: the config's (auto)")
    ap.add_argument("--zero", type=int, default=2)
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--micro", type=int, help="train.micro_batch_size (default: the config's)")
    ap.add_argument("--gc", action="store_true", help="gradient checkpointing")
    ap.add_argument("--packing", action=argparse.BooleanOptionalAction, help="default: the config's (auto)")
    ap.add_argument("--no-share", action="store_true", help="train.share_prompt_prefix=false")
    ap.add_argument("--cuda-graphs", default="auto", choices=["auto", "on", "off"],
                    help="rollout.cuda_graphs of the hf backend (auto = on on a GPU)")
    ap.add_argument("--vllm-mode", default="colocate", choices=["colocate", "separate"],
                    help="rollout.vllm_mode (separate: vLLM on the next GPU, weights by NCCL)")
    ap.add_argument("--vllm-sleep", action="store_true", help="rollout.vllm_sleep: vLLM sleeps during the update")
    ap.add_argument("--compile", action="store_true", help="model.compile (the update's decoder layers)")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()

    from trainer.runner import run

    model_dir = make_model_dir("llama-321m", "/tmp/bench_models/llama-321m")
    cfg = {
        "method": "grpo", "seed": 0, "reward": "exact",
        "model": {"name_or_path": str(model_dir), "dtype": "auto", "lora": {"r": 0},
                  "gradient_checkpointing": args.gc, "compile": args.compile},
        "rollout": {"backend": args.backend, "vllm_mode": args.vllm_mode, "vllm_sleep": args.vllm_sleep,
                    "temperature": 1.0, "max_new_tokens": TOKENS, "min_new_tokens": TOKENS,
                    "group_size": 8,
                    "cuda_graphs": {"auto": "auto", "on": True, "off": False}[args.cuda_graphs]},
        "train": {"steps": args.steps, "lr": 1e-6, "prompts_per_step": 8, "device": DEVICE, "zero_stage": args.zero},
        "checkpoint": {"every": 0, "keep_last": 1},
        "data": {"path": prompt_file("/tmp/bench_prompts.jsonl")},
    }
    if args.engine is not None:
        cfg["train"]["engine"] = args.engine
    if args.micro is not None:
        cfg["train"]["micro_batch_size"] = args.micro
    if args.packing is not None:
        cfg["train"]["packing"] = args.packing
    if args.no_share:
        cfg["train"]["share_prompt_prefix"] = False
    cfg["train"]["skip_zero_advantage"] = False  # rewards are ~all 0 here: run the full update anyway, as TRL does
    reset_peak()
    t0 = time.perf_counter()
    result = run(cfg, run_dir=f"/tmp/bench_runs/grpo-{args.engine or 'auto'}-{args.backend}-{args.tag}-{int(t0)}")
    wall = time.perf_counter() - t0
    rows = [r for r in result.metrics if r.get("role") == "solver"]
    timed = result.step_seconds[1:] or result.step_seconds
    gen = median([r["gen_seconds"] for r in rows[1:]] or [r["gen_seconds"] for r in rows])
    upd = median([r["update_seconds"] for r in rows[1:]] or [r["update_seconds"] for r in rows])
    emit("grpo_step", {
        "impl": f"ours-{args.backend}-{args.engine or 'auto'}" + (f"-z{args.zero}" if args.engine == "deepspeed" else "")
                + (f"-{args.tag}" if args.tag else ""),
        "step_s": median(timed), "gen_s": gen, "update_s": upd, "steps": len(result.step_seconds),
        "all_step_s": [round(s, 3) for s in result.step_seconds],
        "gen_tokens_per_s": median([r["gen_tokens_per_s"] for r in rows[1:]] or [0.0]),
        "response_length": rows[-1]["response_length"] if rows else None,
        "peak_mem_gb": peak_mem_gb(), "wall_s": wall,
        "config": {"micro_batch_size": args.micro or "default", "gc": args.gc,
                   "packing": "auto" if args.packing is None else args.packing,
                   "share_prompt_prefix": False if args.no_share else "auto", "cuda_graphs": args.cuda_graphs,
                   "vllm_mode": args.vllm_mode if args.backend == "vllm" else None,
                   "vllm_sleep": args.vllm_sleep, "compile": args.compile},
    })


if __name__ == "__main__":
    main()
