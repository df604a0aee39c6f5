"""On the GPU: the CUDA-graph decode on a qwen2 model across GRPO steps (issue 21: "Offset increment
outside graph capture encountered unexpectedly" at step 2), and where a GRPO step's time goes.

1. ``rng``: a capture that fails inside ``torch.cuda.graph`` leaves the default CUDA generator marked
   "capturing"; the next random draw raises. Checks that it does here, and that
   ``repair_rng_after_failed_capture`` puts it right.
2. ``grpo``: the product command ``python -m trainer run`` (GRPO) on a random-init qwen2 of
   Qwen2.5-0.5B's shape (SmolLM2's tokenizer, so its vocabulary), CUDA graphs ``auto``, for a few steps,
   once per engine setting; prints per-step rollout / update / step seconds and any graph warnings.

    python3 benchmarks/gpu/check_graphs.py rng
    python3 benchmarks/gpu/check_graphs.py grpo --steps 4 --set train.engine=deepspeed
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import DEVICE, OUT, ROOT, SMOKE, emit, tokenizer

QWEN05 = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
              intermediate_size=4864, tie_word_embeddings=True, rope_theta=1000000.0, max_position_embeddings=32768,
              rms_norm_eps=1e-6, use_sliding_window=False)

if SMOKE:
    QWEN05.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)


def cmd_rng(args) -> None:
    import torch

    from trainer.rollout.static_decode import repair_rng_after_failed_capture

    dev = torch.device(DEVICE)
    x = torch.zeros(4, device=dev)
    graph = torch.cuda.CUDAGraph()
    error = None
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            x.add_(1)
            float(x.sum())  # a host sync inside a capture invalidates it
    except Exception as exc:  # noqa: BLE001
        error = f"{type(exc).__name__}: {str(exc)[:120]}"
    try:
        torch.rand(1, device=dev)
        poisoned = False
    except RuntimeError as exc:
        poisoned = str(exc)[:120]
    repaired = repair_rng_after_failed_capture(dev)
    after = torch.rand(2, device=dev).tolist()
    emit("rng", {"capture_error": error, "draw_after_failed_capture": poisoned or "ok", "repaired": repaired,
                 "draw_after_repair": after})


def make_model(dest: Path) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if (dest / "config.json").is_file():
        return dest
    tok = tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **QWEN05)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


def cmd_grpo(args) -> None:
    model = make_model(Path("/tmp/models/rand-qwen2-0.5b" + ("-smoke" if SMOKE else "")))
    run = Path(f"/tmp/check_runs/{args.tag}")
    cmd = [sys.executable, "-m", "trainer", "run", str(ROOT / "benchmarks/gpu/learn_grpo_gsm8k.yaml"),
           "--out", str(run), "--set", f"model.name_or_path={model}", "--set", f"train.steps={args.steps}",
           "--set", "checkpoint.every=0", "--set", "checkpoint.final=false"]
    for s in args.set:
        cmd += ["--set", s]
    t0 = time.time()
    log = OUT / f"grpo_{args.tag}.log"
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    text = log.read_text()
    warnings = [ln[:300] for ln in text.splitlines() if "HFGenerator" in ln or "Error" in ln or "error" in ln][:8]
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").is_file() else []
    steps = {}
    for r in rows:
        steps.setdefault(r["step"], {}).update({f"{r['role']}/{k}": v for k, v in r.items() if k not in ("step", "role")})
    for step, m in sorted(steps.items()):
        emit("grpo_step", {"tag": args.tag, "step": step, **{k: round(v, 3) for k, v in m.items() if isinstance(v, (int, float))
                                                             and any(w in k for w in ("seconds", "tokens_per_s", "reward_mean", "response_length", "graph", "truncated"))}})
    emit("grpo", {"tag": args.tag, "rc": rc, "seconds": round(time.time() - t0, 1), "steps": len(steps), "warnings": warnings})


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("rng")
    p = sub.add_parser("grpo")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--tag", default="default")
    p.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    {"rng": cmd_rng, "grpo": cmd_grpo}[args.cmd](args)


if __name__ == "__main__":
    main()
