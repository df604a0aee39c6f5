"""Our vLLM backend on the GPU (needs vLLM staged, see benchmarks/gpu/vllm_stage.sh):

1. rollout throughput: ``VLLMGenerator.generate`` vs bare ``LLM.generate`` on the same engine,
   64 rows (8 prompts x 8) x 256 new tokens forced, temperature 1 (target: ours >= 80% of bare);
2. weight push after an in-place change of the trainer's weights (what an optimizer step does):
   seconds per push and the log-prob check (vLLM vs trainer on a fixed sequence);
3. the check fails loudly: a deliberately wrong weight pushed into vLLM must raise WeightSyncError.

    python benchmarks/gpu/bench_vllm.py [--reps 3]
"""
from __future__ import annotations

import argparse
import time

import torch

from bench_grpo import PROMPTS, TOKENS
from common import emit, make_model_dir, median, tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--util", type=float, default=0.35)
    ap.add_argument("--mode", default="colocate", choices=["colocate", "separate"],
                    help="separate: vLLM's engine in its own process on GPU 1, weights by NCCL")
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams as VSP

    from trainer.prompts import chat
    from trainer.rollout.types import SamplingParams
    from trainer.rollout.vllm_backend import VLLMGenerator, WeightSyncError

    path = make_model_dir("llama-321m", "/tmp/bench_models/llama-321m")
    tok = tokenizer()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda()
    t0 = time.perf_counter()
    gen = VLLMGenerator(model, tok, path, gpu_memory_utilization=args.util, mode=args.mode, vllm_device=1)
    emit("vllm", {"what": f"[{args.mode}] engine start + first push", "value": round(time.perf_counter() - t0, 2),
                  "note": f"check {gen.last_check}"})
    prompts = [chat(tok, "You are a helpful assistant.", p) for p in PROMPTS for _ in range(8)]
    # ours as a vLLM run samples by default (train.old_logprobs: auto -> the trainer's log-probs are the
    # PPO reference, so vLLM computes none) and ours asked for log-probs (train.rollout_is_cap or
    # old_logprobs: rollout), against bare LLM.generate with vLLM's defaults
    params = SamplingParams(temperature=1.0, max_new_tokens=TOKENS, min_new_tokens=TOKENS, logprobs=False)
    with_lp = SamplingParams(temperature=1.0, max_new_tokens=TOKENS, min_new_tokens=TOKENS)
    bare = VSP(n=1, temperature=1.0, max_tokens=TOKENS, min_tokens=TOKENS)
    n_tokens = len(prompts) * TOKENS

    def ours(p=params):
        out = gen.generate(prompts, p)
        assert all(len(c.completion_ids) == TOKENS for c in out)

    def plain():
        gen.llm.generate([{"prompt_token_ids": p} for p in prompts], bare, use_tqdm=False)

    runs = (("ours", ours), ("ours_logprobs", lambda: ours(with_lp)), ("bare", plain))
    times = {name: [] for name, _ in runs}
    for _, fn in runs:  # warm-up (CUDA graphs, allocator)
        fn()
    for _ in range(args.reps):  # alternate so drift hurts all alike
        for name, fn in runs:
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t)
    t_ours, t_lp, t_bare = (median(times[n]) for n, _ in runs)
    tag = f"[{args.mode}] "
    emit("vllm", {"what": tag + "rollout 64x256 ours", "value": round(n_tokens / t_ours),
                  "note": f"tok/s ({t_ours:.3f} s; no log-probs: the default with vLLM) {times['ours']}"})
    emit("vllm", {"what": tag + "rollout 64x256 ours with log-probs", "value": round(n_tokens / t_lp),
                  "note": f"tok/s ({t_lp:.3f} s) {times['ours_logprobs']}"})
    emit("vllm", {"what": tag + "rollout 64x256 bare", "value": round(n_tokens / t_bare),
                  "note": f"tok/s ({t_bare:.3f} s) {times['bare']}"})
    emit("vllm", {"what": tag + "ours / bare throughput", "value": round(t_bare / t_ours, 3), "note": "target >= 0.8"})
    emit("vllm", {"what": tag + "ours with log-probs / bare throughput", "value": round(t_bare / t_lp, 3), "note": ""})

    # an in-place change of every weight, as an optimizer step makes
    pushes = []
    for _ in range(2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
        assert gen.needs_sync()
        t = time.perf_counter()
        gen.sync_weights()
        pushes.append(time.perf_counter() - t)
    emit("vllm", {"what": tag + "weight push + check (s)", "value": round(median(pushes), 3),
                  "note": f"last check {gen.last_check}"})

    # a wrong weight inside vLLM must be caught
    bad = [("model.layers.0.mlp.down_proj.weight",
            torch.randn_like(model.model.layers[0].mlp.down_proj.weight, dtype=torch.bfloat16) * 0.5)]
    if args.mode == "colocate":
        gen.llm.apply_model(lambda m: m.load_weights(iter(bad)))
    else:  # the real path: one tensor broadcast over the NCCL weight-transfer group
        gen._send_nccl(bad)
    gen.llm.reset_prefix_cache()
    try:
        gen.verify()
        caught = "NOT caught"
    except WeightSyncError as exc:
        caught = f"caught: {str(exc)[:80]}"
    emit("vllm", {"what": tag + "corrupted push detected", "value": caught.startswith("caught"), "note": caught})

    # LoRA: the policy (adapter merged) and its frozen base (judge / reference, use_adapter=False) share
    # the engine; each call pushes what it needs and the check compares with the trainer's model in the
    # same adapter state. A random adapter makes the two differ, so a wrong state would be caught.
    from peft import LoraConfig, get_peft_model

    from trainer.rollout.hf import adapter_disabled

    lora = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    gen.use_model(lora)
    few = prompts[:8]
    t = time.perf_counter()
    gen.generate(few, params)
    on = dict(gen.last_check)
    gen.generate(few, params, use_adapter=False)
    off = dict(gen.last_check)
    gen.generate(few, params)
    back = dict(gen.last_check)
    probe = gen.probe_ids()
    with adapter_disabled(lora, False):
        base_lp = gen._trainer_logprobs(probe)
    gap = float((gen._trainer_logprobs(probe) - base_lp).abs().mean())
    emit("vllm", {"what": tag + "LoRA policy / frozen base / policy again in one engine", "value": gen.stats["syncs"],
                  "note": f"checks on {on} off {off} back {back}; trainer policy vs base mean |diff| {gap:.3f}; "
                          f"{time.perf_counter() - t:.2f} s for 3 calls of 8 rows"})


if __name__ == "__main__":
    main()
