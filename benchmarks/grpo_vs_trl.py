"""GRPO step time on this CPU: our recipe vs TRL's GRPOTrainer (trl 1.16), in ONE process.

Same model (SmolLM2-135M-Instruct, imported from the bundled GGUF), same GSM8K prompts and
chat template, 8 prompts x 8 completions per step, 64 new tokens forced to full length in both
(``min_new_tokens = max_new_tokens``; TRL through ``generation_kwargs``), same learning rate,
no KL (TRL's default beta 0), one optimizer step per generation batch, micro-batches of 8
completions, float32 weights, the same torch thread count. TRL runs its own ``train()``;
ours runs one step inside TRL's ``on_step_end`` callback, so the two alternate step by step
and a noisy shared CPU hurts both alike. TRL's step time is the wall time from the end of our
interleaved step to TRL's next ``on_step_end`` (generation, rewards, forward/backward, optimizer
step and TRL's own bookkeeping all fall inside); ours is the time of ``grpo_step``.

Our zero-advantage skip is turned off here (both sides run the full backward even when a
group's rewards are all equal), so the comparison is on equal work.

    .venv/bin/python benchmarks/grpo_vs_trl.py [--steps 5] [--warmup 1] [--threads 1]

Prints one JSON line: both median step times (after warm-up) and ours / TRL.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def our_context(model_name: str, args):
    """A RecipeContext for our grpo recipe, built the way trainer.run builds it (no run folder)."""
    from trainer.config import load_config
    from trainer.context import RecipeContext
    from trainer.engine import make_engine
    from trainer.models import load_policy
    from trainer.runner import make_generator

    cfg = load_config({
        "method": "grpo", "seed": 0, "reward": "math",
        "model": {"name_or_path": model_name},
        "rollout": {"group_size": args.group, "max_new_tokens": args.tokens, "min_new_tokens": args.tokens,
                    "temperature": 1.0},
        "train": {"steps": 10**6, "lr": args.lr, "prompts_per_step": args.prompts, "micro_batch_size": 8,
                  "device": "cpu", "kl_coef": 0.0, "grad_clip": 1.0, "skip_zero_advantage": False},
        "data": {"path": "bundled:gsm8k"},
        "grpo": {"system_prompt": SYSTEM, "log_samples": 0},
    })
    policy = load_policy(cfg)
    return RecipeContext(config=cfg, policy=policy, generator=make_generator(cfg, policy),
                         engine=make_engine(cfg, policy))


def trl_trainer(model_path: Path, rows: list[dict], args, on_step_end):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.methods.grpo import score

    def reward(completions, answer, **kwargs):  # the same scoring as our recipe
        return [score(c[-1]["content"], a, "math") for c, a in zip(completions, answer)]

    class Interleave(TrainerCallback):
        def on_step_end(self, *a, **k):
            on_step_end()

    data = Dataset.from_list([{"prompt": [{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": r["prompt"]}], "answer": r["answer"]}
                              for r in rows])
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"), use_cpu=True, bf16=False, report_to=[],
        max_steps=args.warmup + args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, max_grad_norm=1.0, beta=0.0, num_generations=args.group,
        per_device_train_batch_size=8, gradient_accumulation_steps=args.prompts * args.group // 8,
        max_completion_length=args.tokens, generation_kwargs={"min_new_tokens": args.tokens},
        temperature=1.0, top_p=1.0, save_strategy="no", logging_steps=1, seed=0, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="float32")
    return GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                       processing_class=tokenizer, callbacks=[Interleave()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="model name or path")
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each")
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps of each")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per completion (forced)")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for both (1 keeps a shared, oversubscribed CPU from thrashing)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(args.threads)
    from trainer.data import load_prompt_set
    from trainer.methods.grpo import grpo_step
    from trainer.models import resolve_model

    model_path = resolve_model(args.model)
    total = args.warmup + args.steps
    rows = load_prompt_set("bundled:gsm8k", limit=args.prompts * total)
    torch.manual_seed(0)
    ctx = our_context(args.model, args)
    ours: list[float] = []
    trl: list[float] = []
    marks = {"t": None}
    extra = {"ours_gen_seconds": [], "ours_update_seconds": []}

    def on_step_end():
        now = time.perf_counter()
        if marks["t"] is not None:
            trl.append(now - marks["t"])
        k = len(ours)
        if k < total:
            t0 = time.perf_counter()
            metrics = grpo_step(ctx, k + 1, rows[k * args.prompts : (k + 1) * args.prompts])
            ours.append(time.perf_counter() - t0)
            extra["ours_gen_seconds"].append(metrics["gen_seconds"])
            extra["ours_update_seconds"].append(metrics["update_seconds"])
        marks["t"] = time.perf_counter()

    trainer = trl_trainer(model_path, rows, args, on_step_end)
    start = time.perf_counter()
    marks["t"] = start
    trainer.train()
    trl_timed, ours_timed = trl[args.warmup:], ours[args.warmup:]  # index i = step i + 1 for both
    med_ours, med_trl = statistics.median(ours_timed), statistics.median(trl_timed)
    print(json.dumps({
        "benchmark": "grpo_vs_trl", "device": "cpu", "threads": torch.get_num_threads(), "model": args.model,
        "prompts_per_step": args.prompts, "group_size": args.group, "completion_tokens": args.tokens,
        "timed_steps": len(ours_timed), "ours_median_step_s": round(med_ours, 3),
        "trl_median_step_s": round(med_trl, 3), "ratio_ours_over_trl": round(med_ours / med_trl, 3),
        "ours_median_gen_s": round(statistics.median(extra["ours_gen_seconds"][args.warmup:]), 3),
        "ours_median_update_s": round(statistics.median(extra["ours_update_seconds"][args.warmup:]), 3),
        "ours_steps_s": [round(x, 2) for x in ours], "trl_steps_s": [round(x, 2) for x in trl],
        "wall_s": round(time.perf_counter() - start, 1),
    }))


if __name__ == "__main__":
    main()
