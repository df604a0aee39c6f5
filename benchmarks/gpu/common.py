"""Shared helpers of the GPU benchmarks (run on the lent GPU machine, see benchmarks/gpu/README.md).

- ``SHAPES``: the model shapes the issue names (a 321M and a 1.39B Llama), random init, with
  SmolLM2's tokenizer (carried in ``.gpu_assets/smollm2-tokenizer``);
- ``make_model_dir(shape, dest)``: writes such a model (weights + tokenizer) as a Hugging Face folder;
- ``matmul_tflops()``: the card's measured bf16 matmul rate (8192^3, random data, median of events);
- ``count_params`` / ``train_flops``: 6 x params x tokens plus causal attention, per sequence;
- ``emit(name, row)``: append a JSON line to ``$OUT/results.jsonl`` and print it;
- ``table(rows)``: the short table printed last.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TOKENIZER = ROOT / ".gpu_assets" / "smollm2-tokenizer"
OUT = Path(os.environ.get("OUT", "/tmp/bench_out"))
OUT.mkdir(parents=True, exist_ok=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SMOKE = os.environ.get("SMOKE") == "1"  # tiny shapes on the CPU: checks the scripts, measures nothing

SHAPES = {
    # the GRPO-step benchmark model: 321M Llama, SmolLM2 tokenizer
    "llama-321m": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=4,
                       intermediate_size=2816, tie_word_embeddings=True),
    # SmolLM2-135M's shape (the CPU benchmarks' model), random init
    "smollm2-135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         intermediate_size=1536, tie_word_embeddings=True),
    # the update-pass MFU model: Qwen2.5-1.5B-like Llama shape (1.39B with this vocabulary)
    "llama-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                       intermediate_size=8960, tie_word_embeddings=True),
}
if SMOKE:
    for _shape in SHAPES.values():
        _shape.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128)


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def peak_mem_gb() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else float("nan")


def reset_peak() -> None:
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def llama_config(shape: str, tok=None):
    from transformers import LlamaConfig

    tok = tok or tokenizer()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=pad, max_position_embeddings=8192, rope_theta=100000.0, **SHAPES[shape])


def make_model_dir(shape: str, dest: Path, dtype=torch.float32, seed: int = 0) -> Path:
    """A random-init model folder (weights + tokenizer) loadable by any trainer."""
    from transformers import LlamaForCausalLM

    dest = Path(dest)
    if (dest / "config.json").is_file():
        return dest
    tok = tokenizer()
    torch.manual_seed(seed)
    with torch.device(DEVICE):
        model = LlamaForCausalLM(llama_config(shape, tok)).to(dtype)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return dest


def count_params(cfg) -> dict:
    """Matmul parameters per token: layers + output head (the embedding lookup is no matmul)."""
    d, f, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = d // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * hd
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * f  # q, o, k, v, gate/up/down
    head = d * cfg.vocab_size
    total = L * per_layer + head + (0 if cfg.tie_word_embeddings else d * cfg.vocab_size)
    return {"layers": L * per_layer, "head": head, "matmul": L * per_layer + head, "total": total}


def train_flops(cfg, seq_lens: list[int]) -> float:
    """Model FLOPs of one forward+backward (no recompute counted): 6 x matmul params x tokens
    plus causal attention 6 x d x L^2 per layer per sequence (QK^T and AV, half of the square)."""
    p = count_params(cfg)["matmul"]
    tokens = sum(seq_lens)
    attn = 6 * cfg.hidden_size * cfg.num_hidden_layers * sum(n * n for n in seq_lens)
    return 6.0 * p * tokens + attn


def matmul_tflops(n: int = 8192, reps: int = 20) -> float:
    """Measured dense bf16 matmul rate on this card (median of ``reps`` event-timed products)."""
    if DEVICE != "cuda":
        return float("nan")
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return 2 * n ** 3 / times[len(times) // 2] / 1e12


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def emit(name: str, row: dict) -> dict:
    row = {"bench": name, "device": device_name(), "time": time.strftime("%H:%M:%S"), **row}
    with open(OUT / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print("RESULT", json.dumps(row), flush=True)
    return row


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def table(rows: list[dict], cols: list[str]) -> str:
    widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in cols]
    line = " | ".join(c.ljust(w) for c, w in zip(cols, widths))
    out = [line, "-" * len(line)]
    out += [" | ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)
