"""Does telling SPICE's Challenger the recall rule change what it writes? (``gate.recall``, issue 30)

Runs the recipe's own Challenger (``spice_tasks.challenge``: both turns, the prefills, the thinking turn, the strict
parsing and the gate's model-free rules, as training does) with a real model on the CPU over held-out Wikipedia
documents, A attempts per document, once with ``gate.recall`` off and once on, same seed. Per arm: tasks parsed,
numeric tasks, numeric tasks whose question gives no number (``gate.asks_recall``, counted in both arms, so the off
arm shows what the rule would refuse), tasks valid by the model-free rules, and the invalid reasons. Every task is
printed.

    .venv/bin/python benchmarks/spice_recall_probe.py --model qwen2.5-coder-1.5b-instruct --docs 24 --attempts 1
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from trainer.config import GateConfig
from trainer.evaluate import _spice_ctx, load_model, spice_section
from trainer.methods.gate import NUMERIC_ANSWER_TYPES, asks_recall
from trainer.methods.spice_tasks import challenge
from trainer.rollout import SamplingParams
from trainer.tools.corpus import Document

WIKI = Path(__file__).resolve().parents[1] / ".gpu_assets" / "wiki_heldout.jsonl"  # benchmarks/gpu/learn_assets.sh


def documents(path: Path, n: int) -> list[Document]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:n]
    return [Document(str(r.get("id", i)), r.get("title", ""), r["text"]) for i, r in enumerate(rows)]


def probe(loaded, docs, args, recall: bool) -> dict:
    section = spice_section({"challenger_attempts": args.attempts, "max_document_tokens": args.doc_tokens,
                             "format_max_new_tokens": args.format_tokens, "task_max_new_tokens": args.task_tokens})
    sampling = SamplingParams(temperature=args.temperature, top_p=1.0, max_new_tokens=args.task_tokens)
    ctx = _spice_ctx(loaded, section, sampling)
    ctx.config.gate, ctx.config.seed = GateConfig(recall=recall), args.seed
    loaded.generator.rng = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    out = challenge(ctx, docs, step=0)
    parsed = [a for a in out if a.task is not None]
    numeric = [a for a in parsed if a.task.format == "free_form" and a.task.answer_type in NUMERIC_ANSWER_TYPES]
    recalls = [a for a in numeric if asks_recall(a.task.question, a.task.answer_type)]
    reasons = collections.Counter(re.sub(r"\(.*", "", a.reason)[:60].strip() for a in out if not a.valid)
    tasks = [{"doc": a.doc_title, "valid": a.valid, "reason": a.reason[:80],
              "format": a.task.format if a.task else None, "type": a.task.answer_type if a.task else None,
              "question": a.task.question if a.task else None, "answer": a.task.answer if a.task else None}
             for a in out]
    return {"recall": recall, "attempts": len(out), "parsed": len(parsed), "numeric": len(numeric),
            "numeric_recall": len(recalls), "valid": sum(a.valid for a in out),
            "formats": dict(collections.Counter(f"{a.task.format}/{a.task.answer_type}" for a in parsed)),
            "invalid_reasons": dict(reasons), "seconds": round(time.time() - t0, 1), "tasks": tasks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--docs", type=int, default=24)
    ap.add_argument("--corpus", type=Path, default=WIKI, help="JSONL with title and text (default: held-out wiki)")
    ap.add_argument("--attempts", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--doc-tokens", type=int, default=512)
    ap.add_argument("--format-tokens", type=int, default=128, help="turn one's budget (the GPU runs': 128)")
    ap.add_argument("--task-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", default="off,on", help="gate.recall off, on, or both in that order")
    args = ap.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"spice_recall_probe: no corpus at {args.corpus}; run benchmarks/gpu/learn_assets.sh "
                         "or give --corpus FILE.jsonl")
    loaded = load_model(f"base:{args.model}", device="cpu")
    docs = documents(args.corpus, args.docs)
    for arm in args.arms.split(","):
        result = probe(loaded, docs, args, recall=arm == "on")
        tasks = result.pop("tasks")
        print(json.dumps({"model": args.model, "temperature": args.temperature, **result}), flush=True)
        for t in tasks:
            print("   ", json.dumps(t), flush=True)


if __name__ == "__main__":
    main()
