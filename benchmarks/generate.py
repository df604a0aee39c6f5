"""Generation throughput: our decode loop (HFGenerator) vs transformers' ``model.generate``.

Same model, same prompts, same sampling (temperature 1, forced length), the shape of the
GRPO benchmark: 8 distinct prompts x 8 samples each = 64 rows, 64 new tokens per row.
Runs alternate between the two so a noisy shared CPU hurts both alike; the best of
``--reps`` runs of each is reported. Prints one JSON line.

    .venv/bin/python benchmarks/generate.py [--model smollm2-135m-instruct] [--prompts 8]
        [--group 8] [--tokens 64] [--reps 2] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. "
    "Her parents decided to give her $15 for that purpose, and her grandparents twice as much as her parents. "
    "How much more money does Betty need to buy the wallet?",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
    "Mark has a garden with flowers. He planted plants of three different colors in it. Ten of them are yellow, "
    "and there are 80% more of those in purple. How many flowers does Mark have in his garden?",
    "Albert is wondering how much pizza he can eat in one day. He buys 2 large pizzas and 2 small pizzas. "
    "A large pizza has 16 slices and a small pizza has 8 slices. How many pieces does he eat that day?",
    "Ken created a care package to send to his brother, who was away at boarding school. How heavy was it?",
    "Alexis is applying for a new job and bought a new set of business clothes to wear to the interview. "
    "She went to a department store with a budget of $200. How much did she pay for the shoes?",
]


def load(model_name: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.models import resolve_model

    path = resolve_model(model_name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, tokenizer


def run_ours(model, tokenizer, prompts, tokens):
    from trainer.rollout import HFGenerator, SamplingParams

    gen = HFGenerator(model, tokenizer)
    start = time.perf_counter()
    outs = gen.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=tokens, min_new_tokens=tokens))
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(o.completion_ids) for o in outs)


def run_generate(model, tokenizer, prompts, tokens):
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                             top_k=0, max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=pad)
    elapsed = time.perf_counter() - start
    return elapsed, int(out[:, width:].numel())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model name or path")
    parser.add_argument("--prompts", type=int, default=8, help="distinct prompts")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per sample (forced)")
    parser.add_argument("--reps", type=int, default=2, help="timed runs of each (best is kept)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    from trainer.prompts import chat

    model, tokenizer = load(args.model)
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.prompts)]
    prompts = [chat(tokenizer, "Solve the problem. Put the final answer in \\boxed{}.", q) for q in questions]
    prompts = [p for p in prompts for _ in range(args.group)]
    torch.manual_seed(0)
    run_ours(model, tokenizer, prompts[: args.group], 4)  # warm-up both paths
    run_generate(model, tokenizer, prompts[: args.group], 4)
    ours, ref = [], []
    for rep in range(args.reps):
        ours.append(run_ours(model, tokenizer, prompts, args.tokens))
        ref.append(run_generate(model, tokenizer, prompts, args.tokens))
        print(f"rep {rep}: ours {ours[-1][0]:.2f}s, generate {ref[-1][0]:.2f}s", file=sys.stderr, flush=True)
    best_ours = min(ours)
    best_ref = min(ref)
    result = {
        "benchmark": "generate",
        "model": args.model,
        "rows": len(prompts),
        "distinct_prompts": args.prompts,
        "prompt_tokens": sum(len(p) for p in prompts) // len(prompts),
        "new_tokens": args.tokens,
        "threads": torch.get_num_threads(),
        "ours_seconds": round(best_ours[0], 3),
        "generate_seconds": round(best_ref[0], 3),
        "ours_tokens_per_s": round(best_ours[1] / best_ours[0], 1),
        "generate_tokens_per_s": round(best_ref[1] / best_ref[0], 1),
        "speedup": round(best_ref[0] / best_ours[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
