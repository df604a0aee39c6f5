"""HFGenerator decode: the eager loop vs CUDA-graph replay of a static-cache step.

    source benchmarks/gpu/setup.sh && python3 benchmarks/gpu/bench_decode.py [--reps 3] [--tokens 256]

The GRPO-step shape (benchmarks/gpu/bench_grpo.py): the 321M Llama (random init, SmolLM2
tokenizer), its 8 prompts x 8 rows = 64 rows, 256 new tokens forced (min = max new tokens),
temperature 1, float32 weights under bf16 autocast (what ``trainer.run`` does on a GPU).

Prints one ``RESULT`` JSON line per measurement (also appended to $OUT/results.jsonl):

- ``decode_check``: greedy, 32 tokens, both paths on the same prompts: rows whose tokens are
  identical, the first step where any row differs, and the largest |logprob difference| over
  the steps before each row's first difference. Run twice: bf16 autocast (the benchmark's
  setting; a random-init model has near-ties, so bf16 rounding can flip an argmax) and float32
  without TF32 (should agree to ~1e-5).
- ``decode_speed``: one line per timed repetition (paths alternate: eager, graph, and graph
  with transformers' sdpa instead of the packed-GQA attention, after one warm-up call each,
  which includes the graph capture), then ``decode_summary``: median seconds, tokens/s, ms per
  decode step, speed-ups, and ``status``: ok | fallback (the graph path did not engage; the
  reason is printed) | error. The last line printed starts with ``DECODE:``.

Every section catches its own exception and reports it; the script always gets to the summary.
With ``SMOKE=1`` (CPU, tiny shapes) the "graph" side is the same static-cache step run eagerly.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DEVICE, SMOKE, emit, make_model_dir, median, peak_mem_gb, reset_peak  # noqa: E402

from bench_grpo import PROMPTS  # noqa: E402

GROUP = 8


def load(model_dir, dtype=torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa")
    return model.to(DEVICE).eval(), tok


def make_prompts(tok) -> list[list[int]]:
    from trainer.prompts import chat

    unique = [chat(tok, "You are a helpful assistant.", p) for p in PROMPTS]
    return [p for p in unique for _ in range(GROUP)]  # a GRPO group repeats each prompt


def generators(model, tok, autocast, nopack: bool = False):
    """(eager loop, graph path[, graph path with transformers' sdpa instead of packed GQA])."""
    from trainer.rollout import HFGenerator

    graph_kw = {"cuda_graphs": True} if DEVICE == "cuda" else {"static_cache": True}
    gens = [HFGenerator(model, tok, autocast_dtype=autocast, cuda_graphs=False, seed=0),
            HFGenerator(model, tok, autocast_dtype=autocast, seed=0, **graph_kw)]
    if nopack:
        gens.append(HFGenerator(model, tok, autocast_dtype=autocast, seed=0, **graph_kw))
        gens[-1]._pack_gqa = False
    return gens


def graph_status(gen) -> tuple[str, str | None]:
    mode = gen.last_stats.get("decode")
    want = "cuda_graph" if DEVICE == "cuda" else "static"
    if mode == want:
        return "ok", None
    return "fallback", getattr(gen, "_static_off", None) or f"decode mode {mode!r}"


def check(model, tok, prompts, autocast, label: str) -> dict:
    """Greedy tokens and logprobs of both paths on the same prompts."""
    from trainer.rollout import SamplingParams

    eager, graph = generators(model, tok, autocast)
    params = SamplingParams(temperature=0.0, max_new_tokens=32, min_new_tokens=32)
    a = eager.generate(prompts, params)
    b = graph.generate(prompts, params)
    status, why = graph_status(graph)
    same_rows, first_diff, max_lp = 0, None, 0.0
    for x, y in zip(a, b):
        n = next((i for i, (s, t) in enumerate(zip(x.completion_ids, y.completion_ids)) if s != t),
                 min(len(x.completion_ids), len(y.completion_ids)))
        if x.completion_ids == y.completion_ids:
            same_rows += 1
        else:
            first_diff = n if first_diff is None else min(first_diff, n)
        # logprobs compared up to and including the first differing step (same context there)
        upto = min(n + 1, len(x.logprobs), len(y.logprobs))
        if upto:
            max_lp = max(max_lp, max(abs(p - q) for p, q in zip(x.logprobs[:upto], y.logprobs[:upto])))
    return emit("decode_check", {
        "precision": label, "rows": len(prompts), "tokens": 32, "identical_rows": same_rows,
        "first_differing_step": first_diff, "max_abs_logprob_diff": max_lp,
        "graph_path": status, "fallback_reason": why, "graph_stats": graph.last_stats,
        "note": ("should agree to ~1e-5" if autocast is None else
                 "bf16 rounding differs between kernels; on a random-init model it can flip near-tied argmaxes, "
                 "after which rows diverge: judge by the logprob difference up to the first differing step"),
    })


def speed(model, tok, prompts, autocast, tokens: int, reps: int, nopack: bool) -> dict:
    from trainer.rollout import SamplingParams

    gens = dict(zip(("eager", "graph", "graph_nopack"), generators(model, tok, autocast, nopack)))
    graph = gens["graph"]
    params = SamplingParams(temperature=1.0, max_new_tokens=tokens, min_new_tokens=tokens)
    runs = {name: [] for name in gens}
    for name, gen in gens.items():  # warm-up (graph: capture)
        t0 = time.perf_counter()
        gen.generate(prompts, params)
        emit("decode_warmup", {"path": name, "s": time.perf_counter() - t0, "stats": gen.last_stats,
                               "fallback_reason": getattr(gen, "_static_off", None)})
    status, why = graph_status(graph)
    reset_peak()
    for rep in range(reps):
        for name, gen in gens.items():
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            outs = gen.generate(prompts, params)
            dt = time.perf_counter() - t0
            n_tok = sum(len(o.completion_ids) for o in outs)
            runs[name].append(dt)
            emit("decode_speed", {"path": name, "rep": rep, "s": dt, "tokens": n_tok, "tok_per_s": n_tok / dt,
                                  "ms_per_step": 1e3 * dt / max(1, gen.last_stats.get("steps", 1)),
                                  "decode": gen.last_stats.get("decode")})
    e, g = median(runs["eager"]), median(runs["graph"])
    n_tok = len(prompts) * tokens
    row = {
        "rows": len(prompts), "new_tokens": tokens, "reps": reps, "autocast": str(autocast),
        "eager_s": e, "graph_s": g, "eager_tok_per_s": n_tok / e, "graph_tok_per_s": n_tok / g,
        "eager_ms_per_step": 1e3 * e / tokens, "graph_ms_per_step": 1e3 * g / tokens,
        "speedup": e / g, "status": status, "fallback_reason": why,
        "packed_gqa": bool(graph._static is not None and graph._static.pack_gqa),
        "graph_captures": graph.last_stats.get("graph_captures"), "peak_mem_gb": peak_mem_gb(),
    }
    if "graph_nopack" in runs:
        row["graph_nopack_s"] = median(runs["graph_nopack"])
        row["speedup_nopack"] = e / row["graph_nopack_s"]
    return emit("decode_summary", row)


def section(name: str, fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # report and go on: the other sections still run
        traceback.print_exc()
        return emit("decode_error", {"section": name, "error": f"{type(exc).__name__}: {exc}", "status": "error"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=8 if SMOKE else 256)
    ap.add_argument("--no-nopack", action="store_true", help="skip the graph variant without packed GQA")
    args = ap.parse_args()
    t_start = time.perf_counter()
    torch.manual_seed(0)
    try:
        model_dir = make_model_dir("llama-321m", "/tmp/bench_models/llama-321m" + ("-smoke" if SMOKE else ""))
        model, tok = load(model_dir)
        prompts = make_prompts(tok)
    except Exception as exc:  # e.g. .gpu_assets (the tokenizer) not carried
        traceback.print_exc()
        emit("decode_error", {"section": "setup", "error": f"{type(exc).__name__}: {exc}", "status": "error"})
        print("DECODE: status=error (setup failed: carry .gpu_assets for the SmolLM2 tokenizer)", flush=True)
        return
    bf16 = torch.bfloat16 if DEVICE == "cuda" else None
    results = []
    results.append(section("check_bf16", check, model, tok, prompts, bf16, "bf16-autocast" if bf16 else "fp32"))
    if DEVICE == "cuda":
        tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        results.append(section("check_fp32", check, model, tok, prompts, None, "fp32-no-tf32"))
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    results.append(section("speed", speed, model, tok, prompts, bf16, args.tokens, args.reps, not args.no_nopack))
    summary = results[-1]
    status = "error" if any(r.get("status") == "error" for r in results) else summary.get("status", "error")
    if any(r.get("graph_path") == "fallback" for r in results):
        status = "fallback"
    nan = float("nan")
    print(f"DECODE: status={status} speedup={summary.get('speedup', nan):.2f}x "
          f"(without packed GQA {summary.get('speedup_nopack', nan):.2f}x) "
          f"eager={summary.get('eager_ms_per_step', nan):.2f} ms/step "
          f"graph={summary.get('graph_ms_per_step', nan):.2f} ms/step "
          f"wall={time.perf_counter() - t_start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
