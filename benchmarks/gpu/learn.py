"""Does SPICE on SmolLM2-135M-Instruct learn anything in minutes of one GPU? (run_learn.sh's gguf, train, eval)

Three sub-commands, run on the GPU node from the repository root after ``source benchmarks/gpu/setup.sh``
(and vLLM staged: benchmarks/gpu/vllm_stage.sh):

    python benchmarks/gpu/learn.py model            # GGUF parts (.gpu_assets/gguf*/part*) -> /tmp/models/smollm2-135m-instruct
    python benchmarks/gpu/learn.py train --minutes 7   # the product command `python -m trainer run learn_spice.yaml`
    python benchmarks/gpu/learn.py eval --run /tmp/learn/run

``train`` stops the run after ``--minutes`` (every 10th step is checkpointed, so a stopped run keeps its
checkpoints) and copies its metrics to $OUT. ``eval`` takes the base model and up to three checkpoints
spread over the run and measures, on documents the run never saw (``.gpu_assets/wiki_heldout.jsonl``):

- the cross-play matrix of SPICE's Figure 3: challenger_i's tasks (valid SPICE tasks written from the
  held-out documents) answered by reasoner_j, pass rate per cell (4 answers per task, T=0.7);
- the Reasoner's accuracy, base vs final: a cloze QA set built from the held-out documents
  (trainer.evaluate.cloze_items, normalized exact match) and GSM8K test, greedy, with 95% bootstrap
  intervals (the noise level of each number).

All models share one vLLM engine: each checkpoint's weights are pushed into it (the trainer's weight
push + log-prob check) before it plays; without vLLM the transformers backend is used. Results are JSON
lines in $OUT/results.jsonl (common.emit) and a table printed last.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import DEVICE, OUT, ROOT, emit

MODEL_DIR = Path(os.environ.get("LEARN_MODEL", "/tmp/models/smollm2-135m-instruct"))  # a CPU smoke run points elsewhere
CONFIG = ROOT / "benchmarks" / "gpu" / "learn_spice.yaml"
HELDOUT = ROOT / ".gpu_assets" / "wiki_heldout.jsonl"


# ---- model ----------------------------------------------------------------------------------------

def cmd_model(args) -> None:
    """Join the carried GGUF parts (one folder .gpu_assets/ggufN/partN a call) and import it."""
    from trainer.models import import_gguf

    parts_dir = Path("/tmp/gguf_parts")
    parts_dir.mkdir(parents=True, exist_ok=True)
    for part in sorted(ROOT.glob(".gpu_assets/gguf*/part*")):
        shutil.copy(part, parts_dir / part.name)
    manifest = (ROOT / "benchmarks" / "gpu" / "gguf_manifest.txt").read_text().split()
    want = manifest[1].split(",")
    have = sorted(p.name for p in parts_dir.iterdir())
    print(f"gguf parts: {have} of {want}")
    if (MODEL_DIR / "config.json").is_file():
        print(f"model already at {MODEL_DIR}")
        return
    if not set(want) <= set(have):
        print("gguf: parts missing; carry the next folder")
        return
    gguf = Path("/tmp/smollm2.gguf")
    with gguf.open("wb") as f:
        for name in want:
            f.write((parts_dir / name).read_bytes())
    import hashlib

    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    if digest != manifest[0]:
        raise SystemExit(f"gguf checksum mismatch: {digest} != {manifest[0]}")
    import_gguf(gguf, MODEL_DIR)
    print(f"model imported to {MODEL_DIR}")


# ---- train ----------------------------------------------------------------------------------------

def cmd_train(args) -> None:
    """``python -m trainer run`` for at most ``--minutes``; metrics and the last step's samples to $OUT."""
    run = Path(args.run)
    cmd = [sys.executable, "-m", "trainer", "run", str(CONFIG), "--out", str(run), *sum((["--set", s] for s in args.set), [])]
    if args.resume:
        cmd.append("--resume")
    print("train:", " ".join(cmd), flush=True)
    t0 = time.time()
    log = open(OUT / "learn_train.log", "a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        proc.wait(timeout=args.minutes * 60)
        stopped = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stopped = True
    seconds = time.time() - t0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").is_file() else []
    shutil.copy(run / "metrics.jsonl", OUT / "learn_metrics.jsonl") if rows else None
    steps = max((r["step"] for r in rows), default=0)
    ckpts = sorted(p.name for p in (run / "checkpoints").glob("step-*")) if (run / "checkpoints").is_dir() else []
    emit("learn", {"what": "train", "rc": proc.returncode, "stopped_at_time_limit": stopped, "seconds": round(seconds, 1),
                   "steps": steps, "checkpoints": ckpts})
    curve(rows)


def curve(rows: list[dict]) -> None:
    """Per-step training signals, averaged over blocks of steps (the JSON lines hold every step)."""
    keys = {"challenger": ["valid_rate", "reward_mean", "pass_rate_mean", "mcq_share"],
            "reasoner": ["accuracy", "tasks", "boxed_rate"], "system": ["rollout_seconds", "update_seconds"]}
    by_step: dict[int, dict] = {}
    for r in rows:
        for k, v in r.items():
            if isinstance(v, (int, float)) and k != "step":
                by_step.setdefault(r["step"], {})[f"{r['role']}/{k}"] = v
    if not by_step:
        return
    steps = sorted(by_step)
    block = max(1, len(steps) // 5)
    for i in range(0, len(steps), block):
        chunk = steps[i:i + block]
        row = {"steps": f"{chunk[0]}-{chunk[-1]}"}
        for role, names in keys.items():
            for name in names:
                vals = [by_step[s][f"{role}/{name}"] for s in chunk if f"{role}/{name}" in by_step[s]]
                if vals:
                    row[f"{role}/{name}"] = round(sum(vals) / len(vals), 4)
        emit("learn_curve", row)
    emit("learn_metric_names", {"names": sorted({k for v in by_step.values() for k in v})})


# ---- eval -----------------------------------------------------------------------------------------

class Models:
    """The base model and the chosen checkpoints, each a LoadedModel; one shared vLLM engine."""

    def __init__(self, specs: list[tuple[str, Path]], use_vllm: bool):
        import torch
        from transformers import AutoModelForCausalLM

        from trainer.evaluate import LoadedModel
        from trainer.models import load_tokenizer
        from trainer.rollout import HFGenerator

        self.tok = load_tokenizer(MODEL_DIR)
        self.loaded, self.gen = [], None
        for label, path in specs:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(DEVICE).eval()
            gen = HFGenerator(model, self.tok, autocast_dtype=torch.bfloat16 if DEVICE == "cuda" else None)
            self.loaded.append(LoadedModel(model=model, tokenizer=self.tok, generator=gen, label=label, path=path,
                                           base=str(MODEL_DIR)))
        if use_vllm:
            from trainer.rollout.vllm_backend import VLLMGenerator

            self.gen = VLLMGenerator(self.loaded[0].model, self.tok, str(MODEL_DIR), gpu_memory_utilization=0.3,
                                     max_model_len=4096)
            for lm in self.loaded:
                lm.generator = self.gen

    def activate(self, i: int):
        """The i-th model, with its weights in the shared vLLM engine."""
        lm = self.loaded[i]
        if self.gen is not None and self.gen.model is not lm.model:
            self.gen.use_model(lm.model)
            self.gen.sync_weights()
            emit("learn_push", {"model": lm.label, "check": self.gen.last_check})
        return lm


def pick_checkpoints(run: Path, n: int = 3) -> list[Path]:
    ckpts = sorted((run / "checkpoints").glob("step-*"))
    if len(ckpts) <= n:
        return ckpts
    idx = sorted({round(i * (len(ckpts) - 1) / (n - 1)) for i in range(n)})
    return [ckpts[i] for i in idx]


def cmd_eval(args) -> None:
    from trainer.evaluate import challenger_tasks, cloze_items, evaluate, load_benchmark, solve_rate
    from trainer.rollout import SamplingParams
    from trainer.tools.corpus import read_jsonl_corpus

    t0 = time.time()
    try:
        import vllm  # noqa: F401

        use_vllm = not args.hf
    except Exception as exc:  # report and go on with the transformers backend
        print(f"eval: no vLLM ({exc}); using the transformers backend")
        use_vllm = False
    ckpts = pick_checkpoints(Path(args.run), args.checkpoints)
    specs = [("base", MODEL_DIR)] + [(c.name, c / "model") for c in ckpts]
    models = Models(specs, use_vllm)
    docs = read_jsonl_corpus(HELDOUT)
    task_docs = docs[: args.task_docs]
    sample = SamplingParams(temperature=0.7, max_new_tokens=256)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)

    # cross-play: rows = challenger (who wrote the tasks), columns = reasoner (who answers)
    tasks = []
    for i in range(len(specs)):
        lm = models.activate(i)
        made, tried = challenger_tasks(lm, task_docs, args.tasks, sample)
        tasks.append(made)
        emit("learn_tasks", {"challenger": lm.label, "valid": len(made), "attempts": tried,
                             "examples": [{"q": t["question"][:200], "a": t["answer"]} for t in made[:3]]})
    matrix = [[None] * len(specs) for _ in specs]
    for j in range(len(specs)):
        lm = models.activate(j)
        for i in range(len(specs)):
            rate, correct = solve_rate(lm, tasks[i], sample, answers_per_task=args.answers)
            matrix[i][j] = None if rate is None else round(rate, 4)
            emit("learn_crossplay", {"challenger": specs[i][0], "reasoner": specs[j][0], "pass_rate": matrix[i][j],
                                     "tasks": len(tasks[i]), "answers": sum(len(c) for c in correct)})
    emit("learn_matrix", {"labels": [s[0] for s in specs], "rows_challenger_cols_reasoner": matrix})

    # the Reasoner's accuracy, base vs the last checkpoint
    cloze = cloze_items(docs[args.task_docs:], args.cloze, seed=0)
    gsm_file = ROOT / ".gpu_assets" / "gsm8k_test.jsonl"  # learn_assets.sh; the device lacks the dataset package
    gsm, _ = load_benchmark(str(gsm_file) if gsm_file.is_file() else "gsm8k")
    gsm_scoring = "math"
    gsm = gsm[: args.gsm8k]
    for i in (0, len(specs) - 1):
        lm = models.activate(i)
        for name, items, scoring in (("heldout_cloze", cloze, "exact"), ("gsm8k", gsm, gsm_scoring)):
            res = evaluate(lm.generator, lm.tokenizer, items, scoring, sampling=greedy, batch_size=256, name=name)
            emit("learn_eval", {"model": lm.label, **res.summary()})
    emit("learn", {"what": "eval seconds", "value": round(time.time() - t0, 1), "vllm": use_vllm})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("model")
    tr = sub.add_parser("train")
    tr.add_argument("--minutes", type=float, default=7.0)
    tr.add_argument("--run", default="/tmp/learn/run")
    tr.add_argument("--resume", action="store_true")
    tr.add_argument("--set", action="append", default=[], help="config overrides KEY=VALUE (e.g. for a CPU smoke run)")
    ev = sub.add_parser("eval")
    ev.add_argument("--run", default="/tmp/learn/run")
    ev.add_argument("--checkpoints", type=int, default=3)
    ev.add_argument("--task-docs", type=int, default=96, help="held-out documents the challengers write tasks from")
    ev.add_argument("--tasks", type=int, default=48, help="valid tasks per challenger (at most)")
    ev.add_argument("--answers", type=int, default=4, help="answers per task in the cross-play cells")
    ev.add_argument("--cloze", type=int, default=300)
    ev.add_argument("--gsm8k", type=int, default=400)
    ev.add_argument("--max-new-tokens", type=int, default=384)
    ev.add_argument("--hf", action="store_true", help="transformers backend even when vLLM is there")
    args = ap.parse_args()
    {"model": cmd_model, "train": cmd_train, "eval": cmd_eval}[args.cmd](args)


if __name__ == "__main__":
    main()
