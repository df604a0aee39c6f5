"""Update-pass step time through each engine (torch, DeepSpeed ZeRO-1/2/3, optional CPU offload)
on one or several GPUs, at the same GLOBAL batch: every rank runs ``trainer.update.policy_update``
on its shard of the same ragged samples and DeepSpeed averages the gradients.

    python benchmarks/gpu/bench_ds_update.py --engine torch
    python benchmarks/gpu/bench_ds_update.py --engine deepspeed --zero 2 [--offload]
    torchrun --standalone --nproc_per_node 2 benchmarks/gpu/bench_ds_update.py --engine deepspeed --zero 2

After timing, the engine's checkpoint (``state_dict``, a collective) is taken and loaded back,
and one more step must give a finite loss (checks the resume path on the GPU). Rank 0 emits.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from bench_update_mfu import prompt_file, ragged_samples
from common import emit, llama_config, median, tokenizer, train_flops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="torch", choices=["torch", "deepspeed"])
    ap.add_argument("--zero", type=int, default=2)
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--shape", default="llama-321m")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gc", action="store_true")
    args = ap.parse_args()

    from transformers import LlamaForCausalLM

    from trainer import distributed as dist
    from trainer.config import load_config
    from trainer.engine import make_engine
    from trainer.models import Policy
    from trainer.update import policy_update

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 or args.engine == "deepspeed":
        dist.init_process_group()
    device = torch.device("cuda", dist.local_rank())
    torch.cuda.set_device(device)
    cfg = load_config({
        "method": "grpo", "data": {"path": prompt_file(f"/tmp/bench_prompts_{dist.rank()}.jsonl")},
        "model": {"dtype": "auto"}, "rollout": {"max_new_tokens": 2048},
        "train": {"device": "cuda", "lr": 1e-6, "engine": args.engine, "zero_stage": args.zero,
                  "offload_optimizer": args.offload, "packing": True, "micro_batch_tokens": args.tokens,
                  "share_prompt_prefix": False, "skip_zero_advantage": False}})
    tok = tokenizer()
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(llama_config(args.shape, tok))
    if args.gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = Policy(model=model, tokenizer=tok, device=device, path=None, autocast_dtype=torch.bfloat16)
    engine = make_engine(cfg, policy)
    everyone = ragged_samples(args.samples, model.config.vocab_size)
    mine = dist.shard(everyone)

    policy_update(policy, engine, mine, cfg)  # warm-up
    times = []
    for _ in range(args.reps):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        metrics = policy_update(policy, engine, mine, cfg)["policy"]
        torch.cuda.synchronize()
        dist.barrier()
        times.append(time.perf_counter() - t0)

    state = engine.state_dict()  # collective; rank 0 holds the tensors
    path = "/tmp/bench_engine_state.pt"
    if dist.is_main():
        torch.save(state, path)
    dist.barrier()
    engine.load_state_dict(torch.load(path, map_location="cpu", weights_only=False))  # as a resumed run does
    after = policy_update(policy, engine, mine, cfg)["policy"]
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in everyone]
    if dist.is_main():
        t = median(times)
        emit("engine_update", {
            "engine": args.engine + (f"-z{args.zero}" if args.engine == "deepspeed" else "")
                      + ("-offload" if args.offload else ""), "gpus": world, "shape": args.shape,
            "step_s": t, "times": [round(x, 4) for x in times], "global_tokens": sum(lengths),
            "tokens_per_s": sum(lengths) / t, "model_tflops_total": train_flops(model.config, lengths) / t / 1e12,
            "grad_norm": metrics["grad_norm"], "loss_after_resume": after["loss"],
            "resume_ok": bool(torch.isfinite(torch.tensor(after["loss"]))),
            "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30})


if __name__ == "__main__":
    main()
