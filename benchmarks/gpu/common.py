"""Shared helpers of the GPU benchmarks (run on a GPU node, see benchmarks/gpu/README.md).

- ``SHAPES``: the model shapes the issue names (a 321M and a 1.39B Llama), random init, with
  SmolLM2's tokenizer (carried in ``.gpu_assets/smollm2-tokenizer``);
- ``make_model_dir(shape, dest)``: writes such a model (weights + tokenizer) as a Hugging Face folder;
- ``matmul_tflops()``: the card's measured bf16 matmul rate (8192^3, random data, median of events);
- ``count_params`` / ``train_flops``: 6 x params x tokens plus causal attention, per sequence;
- ``emit(name, row)``: append a JSON line to ``$OUT/results.jsonl`` and print it;
- ``table(rows)``: the short table printed last;
- the held-out evaluation scripts' shared command line (ssp_eval.py, method_eval.py, spice_eval.py): ``UsageError``
  and ``run_cli`` (bad input: one line, exit 2), ``read_docs``, ``load_run_config``, ``search_tool``, ``load``,
  ``targets``, ``evals_table`` and the options ``add_make_args`` / ``add_eval_args``.
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


# ---- the held-out evaluation scripts' shared command line (ssp_eval.py, method_eval.py, spice_eval.py) ----------

TRAIN_CORPUS, HELDOUT = ".gpu_assets/wiki.jsonl", ".gpu_assets/wiki_heldout.jsonl"  # learn_assets.sh writes both


class UsageError(ValueError):
    """Bad input; ``run_cli`` prints the message as one line and exits 2."""


def run_cli(command, args) -> int:
    """The exit status of ``command(args)``: what it returns (None: 0), or 2 with ``error: <message>`` on stderr
    for a ``UsageError``."""
    try:
        code = command(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code or 0


def read_docs(path: str, flag: str = "--docs"):
    """The documents of a JSONL corpus file (id, title, text); a missing or malformed file is a UsageError."""
    from trainer.tools.corpus import CorpusError, read_jsonl_corpus

    try:
        return read_jsonl_corpus(path)
    except CorpusError as exc:
        hint = "" if Path(path).is_file() else f" (benchmarks/gpu/learn_assets.sh writes {HELDOUT})"
        raise UsageError(f"{flag}: {exc}{hint}") from None


def load_run_config(run: Path, path: str | None, methods: tuple[str, ...], overrides: list[str] = ()):
    """The run's config: ``path`` (--config), else RUN/config.yaml; it must be one of ``methods``."""
    from trainer.config import ConfigError, load_config

    example = f"benchmarks/gpu/learn_{methods[0] if len(methods) == 1 else '<method>'}.yaml"
    path = path or (str(run / "config.yaml") if run is not None and (run / "config.yaml").is_file() else None)
    if path is None:
        raise UsageError(f"{run} has no config.yaml; give --config {example}")
    if not Path(path).is_file():
        raise UsageError(f"config {path} does not exist (give --config {example} or a run folder's config.yaml)")
    try:
        cfg = load_config(path, list(overrides))
    except ConfigError as exc:
        raise UsageError(f"config {path}: {exc}") from None
    if cfg.method not in methods:
        raise UsageError(f"config {path} is method {cfg.method!r}; this script measures {', '.join(methods)}")
    return cfg


def eval_inputs(args, methods: tuple[str, ...]):
    """An eval subcommand's checked inputs: (run folder, the items of --bench (the first --limit), the run's config);
    --name must be a benchmark name evals.jsonl accepts."""
    from trainer.evaluate import BenchmarkError, read_jsonl
    from trainer.runfolder import BENCHMARK_NAME

    if not BENCHMARK_NAME.fullmatch(args.name):
        raise UsageError(f"--name {args.name!r} must be lowercase letters, digits, - and _")
    try:
        items = read_jsonl(args.bench)
    except BenchmarkError as exc:
        raise UsageError(str(exc)) from None
    run = Path(args.run)
    return run, items[: args.limit] if args.limit else items, load_run_config(run, args.config, methods)


def trained_reserve(run: Path, cfg) -> int | None:
    """The answer reserve the run trained with: its ``rollout.answer_reserve_tokens``, or 0 for a run whose
    config.yaml predates the setting (it trained without one; a default would change how its base is measured)."""
    import yaml

    path = run / "config.yaml"
    if path.is_file():
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if "answer_reserve_tokens" not in (raw.get("rollout") or {}):
            return 0
    return cfg.rollout.answer_reserve_tokens


def search_tool(files: list[str], tokenizer, top_k: int):
    """The runs' search tool (trainer.methods.ssp.run_ssp: SearchTool over BM25) over several JSONL files:
    (tool, number of documents)."""
    from trainer.tools.bm25 import InMemoryRetriever
    from trainer.tools.corpus import CorpusError, read_jsonl_corpus
    from trainer.tools.search import SearchTool

    docs, seen = [], set()
    for f in files:
        if not Path(f).is_file():
            raise UsageError(f"search corpus {f} does not exist (benchmarks/gpu/learn_assets.sh writes "
                             f"{TRAIN_CORPUS} and {HELDOUT})")
        try:
            found = read_jsonl_corpus(f)
        except CorpusError as exc:
            raise UsageError(str(exc)) from None
        docs += [d for d in found if d.id not in seen]
        seen.update(d.id for d in found)
    return SearchTool(InMemoryRetriever(docs), k=top_k, tokenizer=tokenizer), len(docs)


def load(spec: str):
    """``trainer.evaluate.load_model(spec)``; a spec that names no model is a UsageError."""
    from trainer.evaluate import ModelSpecError, load_model
    from trainer.models import ModelNotFound

    try:
        return load_model(spec)
    except (ModelSpecError, ModelNotFound) as exc:
        raise UsageError(str(exc)) from None


def base_spec(run: Path) -> str:
    """The model spec of a run's base: its config.yaml's model.name_or_path, a folder as it is, else base:<name>."""
    import yaml

    cfg_file = run / "config.yaml"
    if not cfg_file.is_file():
        raise UsageError(f"{run} has no config.yaml; name the models with --model base:<name> / a checkpoint")
    base = str(yaml.safe_load(cfg_file.read_text())["model"]["name_or_path"])
    return base if Path(base).is_dir() else f"base:{base}"


def targets(run: Path, models: list[str]) -> list[tuple[int, str]]:
    """(step, spec) per model: base -> 0, a checkpoint -> its meta.json step; default: base + all checkpoints."""
    from trainer.evaluate import ModelSpecError, describe_target

    if not models:
        models = [base_spec(run)]
        ckpts = run / "checkpoints"
        if ckpts.is_dir():
            models += [str(p) for p in sorted(ckpts.glob("step-*")) if (p / "meta.json").is_file()]
    out = []
    for spec in models:
        if spec.startswith("base:"):
            out.append((0, spec))
            continue
        try:
            target = describe_target(spec)
        except ModelSpecError as exc:
            raise UsageError(str(exc)) from None
        step = target.get("step")
        if target["kind"] == "model" and step is None:
            step = 0  # a plain model folder (e.g. the imported base): the base's step
        if not isinstance(step, int):
            raise UsageError(f"{spec} has no step (no meta.json); give a checkpoint folder or base:<name>")
        out.append((step, spec))
    return sorted(out)


def evals_table(run: Path, names: list[str]) -> None:
    """Print RUN/evals.jsonl's rows of the benchmarks ``names``, each against its step-0 (base) score."""
    from trainer.runfolder import read_evals

    rows = [r for r in read_evals(run) if r["benchmark"] in names]
    base = {r["benchmark"]: r["score"] for r in rows if r["step"] == 0}
    print(f"\n{'benchmark':<20} {'step':>5} {'n':>4} {'score':>7} {'95% CI':>17} {'vs base':>8}  checkpoint")
    for r in rows:
        delta = f"{100 * (r['score'] - base[r['benchmark']]):+.1f}" if r["benchmark"] in base else "-"
        print(f"{r['benchmark']:<20} {r['step']:>5} {r['n']:>4} {100 * r['score']:>6.1f}% "
              f"[{100 * r['ci_low']:5.1f}, {100 * r['ci_high']:5.1f}] {delta:>8}  {r['checkpoint']}")


def add_make_args(parser, n: int, out: str | None = None) -> None:
    """A make-* subcommand's options: --docs (held-out documents), --n, --seed, --out (required without a default)."""
    parser.add_argument("--docs", default=HELDOUT, help="JSONL documents the items come from (never trained on)")
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=out is None, default=out)


def add_eval_args(parser, what: str) -> None:
    """An eval subcommand's options of a run folder: --run, --model, --config, --search, --limit,
    --max-new-tokens, --batch-size (``what``: what one item is, for --limit's help)."""
    parser.add_argument("--run", required=True, help="the run folder (evals.jsonl and eval_samples/ are written "
                        "there)")
    parser.add_argument("--model", action="append", default=[], help="base:<name> or a checkpoint folder (repeat); "
                        "default: the run's base model and all its checkpoints")
    parser.add_argument("--config", help="default: RUN/config.yaml")
    parser.add_argument("--search", action="append",
                        help=f"JSONL corpora searched (default {TRAIN_CORPUS} and {HELDOUT})")
    parser.add_argument("--limit", type=int, help=f"the first N {what} only")
    parser.add_argument("--max-new-tokens", type=int, help="default: the run's rollout.max_new_tokens")
    parser.add_argument("--batch-size", type=int, help="default: 256 on a GPU, 16 on the CPU")
