"""GRPO step time with ``train.overlap`` off and one_step (issue 33 item 1), on the 321M Llama of bench_grpo.py:
``--prompts`` x 8 completions x 256 new tokens forced, bf16, the trainer's other settings as shipped (auto).

    python benchmarks/gpu/bench_overlap.py --overlap off|one_step [--prompts 8] [--steps 6] [--tokens 256]

One run per call (a process per setting: DeepSpeed keeps state per process). The first two steps are warm-up (the
first of an overlapped run samples its batch before any update, the second is the first overlapped one); the
median of the rest is reported with the recipe's own gen/update seconds, the time a step waited for its rollout,
the staleness and the behaviour weights. ``SMOKE=1`` runs it on the CPU on a tiny shape (checks the script only).
Prints and appends one RESULT line to $OUT/results.jsonl.
"""
from __future__ import annotations

import argparse
import time

from common import DEVICE, SMOKE, emit, make_model_dir, median, peak_mem_gb, reset_peak

from bench_grpo import prompt_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--overlap", required=True, choices=["off", "one_step", "auto"])
    ap.add_argument("--prompts", type=int, default=8, help="train.prompts_per_step (x 8 completions)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=8 if SMOKE else 256, help="new tokens per completion (forced)")
    ap.add_argument("--shape", default="llama-321m")
    args = ap.parse_args()

    from trainer.runner import run

    model_dir = make_model_dir(args.shape, f"/tmp/bench_models/{args.shape}")
    cfg = {
        "method": "grpo", "seed": 0, "reward": "exact",
        "model": {"name_or_path": str(model_dir), "dtype": "auto", "lora": {"r": 0}},
        "rollout": {"temperature": 1.0, "max_new_tokens": args.tokens, "min_new_tokens": args.tokens, "group_size": 8},
        "train": {"steps": args.steps, "lr": 1e-6, "prompts_per_step": args.prompts, "device": DEVICE,
                  "overlap": args.overlap, "skip_zero_advantage": False},  # rewards ~all 0: run the whole update
        "checkpoint": {"every": 0, "final": False},
        "data": {"path": prompt_file("/tmp/bench_prompts.jsonl")},
    }
    reset_peak()
    t0 = time.perf_counter()
    result = run(cfg, run_dir=f"/tmp/bench_runs/overlap-{args.overlap}-{args.prompts}-{int(t0)}")
    wall = time.perf_counter() - t0
    rows = [r for r in result.metrics if r.get("role") == "solver"]
    timed, later = result.step_seconds[2:] or result.step_seconds, rows[2:] or rows

    def med(key):
        return median([r[key] for r in later if key in r]) if any(key in r for r in later) else None

    emit("grpo_overlap", {
        "overlap": args.overlap, "prompts": args.prompts, "sequences": args.prompts * 8, "tokens": args.tokens,
        "shape": args.shape, "step_s": median(timed), "gen_s": med("gen_seconds"), "update_s": med("update_seconds"),
        "gen_wait_s": med("gen_wait_seconds"), "staleness": [r.get("staleness") for r in rows],
        "is_weight": med("is_weight"), "rollout_kl": med("rollout_kl"),
        "all_step_s": [round(s, 3) for s in result.step_seconds], "peak_mem_gb": peak_mem_gb(), "wall_s": wall,
    })


if __name__ == "__main__":
    main()
