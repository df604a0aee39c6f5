"""Update-pass MFU of the trainer's shared update (``trainer.update.policy_update``) on the 1.39B
Llama shape (hidden 1536, 28 layers, 12 heads, 2 KV heads, FFN 8960), counting only real
(non-pad) tokens, against the card's bf16 matmul rate measured in the same process.

Batches:
- ``dense``: 8 x 2048 tokens, one prompt each (the anchor shape of shared/specs/gpu.md);
- ``ragged``: 64 RL-like samples with distinct prompts (prompt 64-640 tokens, completion
  lengths log-normal, 16..2048, a few truncated at 2048), run padded (micro-batches of
  ``--micro`` sorted samples) and packed (``train.packing``, ``--tokens`` per micro-batch).

Also checks, on the GPU, that the packed path (torch varlen flash attention) gives the padded
path's log-probs (bf16: max/mean abs difference) and that their losses agree.

``--compile`` sets ``model.compile`` (trainer/compile.py: each decoder layer torch.compiled,
dynamic shapes); the first (warm-up) call of each variant pays the compile and is reported
apart as ``warmup_s``, never in the timed reps.

    python benchmarks/gpu/bench_update_mfu.py [--reps 3] [--micro 4] [--tokens 8192] [--compile]
"""
from __future__ import annotations

import argparse
import math
import random
import time

import torch

from common import (DEVICE, SMOKE, count_params, emit, llama_config, matmul_tflops, median, peak_mem_gb, reset_peak, sync,
                    tokenizer, train_flops)


def prompt_file(path) -> str:
    """The config wants a prompt set; this benchmark feeds samples directly."""
    with open(path, "w") as f:
        f.write('{"prompt": "unused", "answer": "0"}\n')
    return str(path)


def ragged_samples(n: int, vocab: int, seed: int = 0):
    from trainer.update import Sample

    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.randint(64, 640)
        c = min(2048, max(16, int(math.exp(rng.gauss(math.log(600), 0.8)))))
        prompt = [rng.randrange(100, vocab) for _ in range(p)]
        comp = [rng.randrange(100, vocab) for _ in range(c)]
        adv = rng.choice([-1.0, 1.0]) * rng.random()
        out.append(Sample(prompt, comp, [1] * c, [-2.0] * c, advantage=adv, role="policy", temperature=1.0))
    return out


def dense_samples(vocab: int, rows: int = 8, prompt: int = 128, total: int = 2048):
    from trainer.update import Sample

    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(rows):
        ids = torch.randint(100, vocab, (total,), generator=g).tolist()
        c = total - prompt
        out.append(Sample(ids[:prompt], ids[prompt:], [1] * c, [-2.0] * c, advantage=1.0, role="policy"))
    return out


def build(cfg_dict):
    from transformers import LlamaForCausalLM

    from trainer.compile import check_supported, compile_decoder_layers
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import Policy

    cfg = load_config(cfg_dict)
    tok = tokenizer()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(llama_config("llama-1.5b", tok))  # float32 master weights
    model.config._attn_implementation = "sdpa"
    if cfg.model.compile:  # what load_policy does for model.compile
        check_supported(cfg)
        compile_decoder_layers(model)
    policy = Policy(model=model, tokenizer=tok, device=torch.device(DEVICE), path=None,
                    autocast_dtype=torch.bfloat16 if DEVICE == "cuda" else None)
    return cfg, policy, make_engine(cfg, policy)


def time_update(policy, engine, samples, cfg, reps: int):
    from trainer.update import policy_update

    sync()
    t0 = time.perf_counter()
    policy_update(policy, engine, samples, cfg)  # warm-up (allocator, kernels; model.compile: the compile)
    sync()
    warmup = time.perf_counter() - t0
    graphs = _compiled_graphs()
    times, metrics = [], None
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        metrics = policy_update(policy, engine, samples, cfg)
        sync()
        times.append(time.perf_counter() - t0)
    if _compiled_graphs() != graphs:  # a recompile inside the timed reps would pollute them
        print(f"WARNING: {_compiled_graphs() - graphs} graph(s) compiled during the timed reps")
    return median(times), times, metrics["policy"], warmup


def _compiled_graphs() -> int:
    """Graphs torch.compile has produced so far in this process (0 without --compile)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def packed_vs_padded_check(policy, samples):
    """bf16 log-probs of 8 ragged samples: padded sdpa path vs packed varlen path."""
    from trainer.update import make_micro_batch, trained_logits

    lm = policy.base_model()
    with torch.no_grad(), policy.autocast():
        pad = make_micro_batch(samples, 1.0, policy.device, shared=False)
        packed = make_micro_batch(samples, 1.0, policy.device, shared=False, packed=True)
        a = torch.log_softmax(trained_logits(lm, pad, policy.device).float(), -1)
        b = torch.log_softmax(trained_logits(lm, packed, policy.device).float(), -1)
        ids = pad.completion[pad.mask]
        la, lb = a.gather(1, ids[:, None]), b.gather(1, ids[:, None])
    return float((la - lb).abs().max()), float((la - lb).abs().mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--engine", default="torch", choices=["torch", "deepspeed"])
    ap.add_argument("--only", default="", help="comma list of variants to run (dense,padded,packed)")
    ap.add_argument("--compile", action="store_true", help="model.compile: torch.compile each decoder layer")
    args = ap.parse_args()

    peak = matmul_tflops()
    emit("matmul", {"bf16_tflops": peak, "shape": "8192^3"})
    base = {"method": "grpo", "data": {"path": prompt_file("/tmp/bench_prompts.jsonl")}, "model": {"dtype": "auto", "attn_implementation": "sdpa", "compile": args.compile},
            "rollout": {"max_new_tokens": 2048, "temperature": 1.0},
            "train": {"device": DEVICE, "lr": 1e-6, "engine": args.engine, "zero_stage": 2, "micro_batch_size": args.micro, "share_prompt_prefix": False,
                      "skip_zero_advantage": False, "micro_batch_tokens": args.tokens}}
    cfg, policy, engine = build(base)
    mcfg = policy.model.config
    params = count_params(mcfg)
    vocab = mcfg.vocab_size
    dense = dense_samples(vocab, *((2, 32, 256) if SMOKE else ()))
    ragged = ragged_samples(args.samples, vocab)

    err_max, err_mean = packed_vs_padded_check(policy, ragged[:8])
    emit("packing_check", {"max_abs_logprob_diff": err_max, "mean_abs_logprob_diff": err_mean, "dtype": "bf16"})

    from trainer.config import load_config

    variants = [("dense 8x2048", dense, False), ("ragged padded", ragged, False), ("ragged packed", ragged, True)]
    if args.only:
        variants = [v for v in variants if any(k in v[0] for k in args.only.split(","))]
    for name, samples, packing in variants:
        cfg_v = load_config({**base, "train": {**base["train"], "packing": packing}})
        lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
        flops = train_flops(mcfg, lengths)
        reset_peak()
        t, times, metrics, warmup = time_update(policy, engine, samples, cfg_v, args.reps)
        achieved = flops / t / 1e12
        emit("update_mfu", {
            "variant": name, "step_s": t, "times": [round(x, 4) for x in times], "real_tokens": sum(lengths),
            "tokens_per_s": sum(lengths) / t, "model_tflops": achieved, "mfu_vs_measured": achieved / peak,
            "peak_matmul_tflops": peak, "params_matmul": params["matmul"], "params_total": params["total"],
            "peak_mem_gb": peak_mem_gb(), "loss": metrics["loss"], "warmup_s": round(warmup, 2),
            "config": {"micro_batch_size": args.micro, "micro_batch_tokens": args.tokens, "packing": packing,
                       "gc": False, "engine": args.engine, "compile": args.compile,
                       "dtype": "fp32 master + bf16 autocast" if args.engine == "torch" else "bf16 weights, fp32 master (DeepSpeed ZeRO-2)",
                       "optimizer": "torch AdamW"}})


if __name__ == "__main__":
    main()
