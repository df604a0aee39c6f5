"""GRPO step time of TRL's GRPOTrainer (trl 1.16) on the same model and shape as bench_grpo.py:
8 prompts x 8 completions x 256 new tokens forced, bf16 autocast over fp32 weights, one optimizer
step per generation batch (16 per micro-batch x 4 accumulation steps = 64 completions), no KL,
no gradient checkpointing (the same settings ours runs with).

    python benchmarks/gpu/bench_trl.py [--steps 5] [--vllm]

``--vllm``: TRL's colocate mode (vLLM in the training process, gpu_memory_utilization 0.3; TRL 1.16 accepts
vLLM 0.22-0.31 and sets RANK/WORLD_SIZE/MASTER_ADDR itself), against ``bench_grpo.py --backend vllm``.

Step time = wall time between consecutive ``on_step_end`` callbacks (generation, scoring,
forward/backward and the optimizer step all fall inside); the first step is warm-up.
"""
from __future__ import annotations

import argparse
import random
import time

from bench_grpo import PROMPTS, TOKENS
from common import DEVICE, emit, make_model_dir, median, peak_mem_gb, reset_peak, sync


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--vllm", action="store_true")
    ap.add_argument("--gc", action="store_true")
    args = ap.parse_args()

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model_dir = make_model_dir("llama-321m", "/tmp/bench_models/llama-321m")
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS] * (args.steps + 2))

    def reward(completions, **kwargs):
        return [random.random() for _ in completions]

    stamps: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, *a, **k):
            sync()
            stamps.append(time.perf_counter())

    cfg = GRPOConfig(
        output_dir="/tmp/bench_runs/trl", per_device_train_batch_size=16, gradient_accumulation_steps=4,
        num_generations=8, max_completion_length=TOKENS, temperature=1.0, top_p=1.0, bf16=DEVICE == "cuda", use_cpu=DEVICE != "cuda",
        learning_rate=1e-6, beta=0.0, max_steps=args.steps, logging_steps=1, save_strategy="no",
        report_to="none", gradient_checkpointing=args.gc,
        # forced lengths: transformers' generate takes min_new_tokens, vLLM's SamplingParams min_tokens
        generation_kwargs={"min_tokens" if args.vllm else "min_new_tokens": TOKENS},
        use_vllm=args.vllm, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, seed=0,
        disable_tqdm=True, log_completions=False, dataloader_num_workers=0, shuffle_dataset=False,
    )
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward, args=cfg, train_dataset=data,
                          callbacks=[Timer()])
    reset_peak()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    steps = [b - a for a, b in zip([t0] + stamps[:-1], stamps)]
    trl_times = [float(h["step_time"]) for h in trainer.state.log_history if "step_time" in h]
    lengths = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
    emit("grpo_step", {
        "impl": "trl-1.16" + ("-vllm" if args.vllm else "-hf"), "step_s": median(steps[1:] or steps),
        "all_step_s": [round(s, 3) for s in steps], "trl_logged_step_time": trl_times, "steps": len(steps), "response_length": lengths[-1] if lengths else None,
        "peak_mem_gb": peak_mem_gb(), "wall_s": wall,
        "config": {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 4, "gc": args.gc},
    })


if __name__ == "__main__":
    main()
