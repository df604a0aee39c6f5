"""A learning run on the GPU machine with the product's own commands, and its checkpoints evaluated as they
come (issue 21). Run from the repository root after ``source benchmarks/gpu/setup.sh``:

    python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_grpo_gsm8k.yaml --run /tmp/runs/grpo \
        --minutes 8 --bench .gpu_assets/gsm8k_heldout.jsonl --set model.name_or_path=/tmp/models/q05
    python3 benchmarks/gpu/learn_run.py eval --run /tmp/runs/grpo --bench .gpu_assets/gsm8k_heldout.jsonl
    python3 benchmarks/gpu/learn_run.py pack --run /tmp/runs/grpo          # run folder (no weights) -> $OUT

``train`` starts ``python -m trainer run CONFIG --out RUN`` (``--resume`` when RUN has a checkpoint) with
``train.time_limit_minutes`` so it stops with a checkpoint inside this call, and meanwhile evaluates the base
model (step 0) and every new checkpoint on ``--bench`` with ``trainer.evaluate`` (greedy, the CUDA-graph
decode, 95% bootstrap interval), on the same GPU. Results go to ``RUN/evals.jsonl`` (one line per
checkpoint and benchmark: step, checkpoint, benchmark, scoring, n, score, ci_low, ci_high, seconds, and
train_seconds = the run's summed step time at that checkpoint), the format ``manage.py import_run`` reads.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import OUT, ROOT, emit

from trainer.runfolder import append_eval, read_evals, write_eval_samples


def evaluated(run: Path) -> set[tuple[int, str]]:
    return {(r["step"], r["benchmark"]) for r in read_evals(run)}


def train_seconds_at(run: Path, step: int) -> float | None:
    """The run's summed step seconds up to ``step`` (its training wall-clock, evaluations excluded)."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return None
    per_step = {}
    for r in map(json.loads, path.read_text().splitlines()):
        if "step_seconds" in r:
            per_step[r["step"]] = r["step_seconds"]
    return round(sum(v for s, v in per_step.items() if s <= step), 1)


def base_model(run: Path, fallback: str | None) -> str:
    cfg = run / "config.yaml"
    if cfg.is_file():
        import yaml

        return str(yaml.safe_load(cfg.read_text())["model"]["name_or_path"])
    return fallback


def eval_one(run: Path, step: int, spec: str, bench: str, max_new_tokens: int, scoring: str | None = None) -> dict:
    import torch

    from trainer.evaluate import evaluate, load_benchmark, load_model
    from trainer.rollout import SamplingParams

    items, scoring = load_benchmark(bench, scoring)
    loaded = load_model(spec)
    result = evaluate(loaded.generator, loaded.tokenizer, items, scoring, batch_size=330,
                      sampling=SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, logprobs=False),
                      name=Path(bench).stem)
    tokens = sum(len(loaded.tokenizer(s["output"] or "")["input_ids"]) for s in result.samples)
    boxed = sum("\\boxed{" in (s["output"] or "") for s in result.samples) / max(1, len(result.samples))
    del loaded
    torch.cuda.empty_cache()
    row = {"step": step, "checkpoint": spec, "benchmark": Path(bench).stem, "scoring": scoring, "n": result.n,
           "score": round(result.score, 4), "ci_low": round(result.ci_low, 4), "ci_high": round(result.ci_high, 4),
           "seconds": round(result.seconds, 1), "train_seconds": train_seconds_at(run, step) if step else 0.0,
           "tokens_per_s": round(tokens / max(result.seconds, 1e-9)), "boxed_rate": round(boxed, 3)}
    row = append_eval(run, row)  # checked against the format import_run reads (trainer/runfolder.py)
    write_eval_samples(run, Path(bench).stem, step, result.samples)  # every item: the web's paired difference
    emit("eval", row)
    return row


def pending_checkpoints(run: Path, bench: str) -> list[tuple[int, Path]]:
    done = evaluated(run)
    out = []
    for ckpt in sorted((run / "checkpoints").glob("step-*")) if (run / "checkpoints").is_dir() else []:
        step = int(ckpt.name.split("-")[1])
        if (step, Path(bench).stem) not in done and (ckpt / "meta.json").is_file():
            out.append((step, ckpt))
    return out


def evaluator(run: Path, args, stop: threading.Event) -> None:
    """Evaluate the base, then each new checkpoint, until ``stop`` is set and nothing is left."""
    base = base_model(run, args.base)
    for bench in args.bench:
        if base and (0, Path(bench).stem) not in evaluated(run):
            eval_one(run, 0, f"base:{base}" if not Path(base).is_dir() else base, bench, args.max_new_tokens, args.scoring)
    while True:
        todo = [(s, c, b) for b in args.bench for s, c in pending_checkpoints(run, b)]
        if not todo and stop.is_set():
            return
        for step, ckpt, bench in todo[-1:] if not stop.is_set() else todo:  # while training: newest first
            try:
                eval_one(run, step, str(ckpt), bench, args.max_new_tokens, args.scoring)
            except Exception as exc:  # noqa: BLE001 - a pruned checkpoint: report, go on
                emit("eval_error", {"step": step, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
        if not todo:
            time.sleep(5)


def cmd_train(args) -> None:
    run = Path(args.run)
    resume = (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("step-*"))
    cmd = [sys.executable, "-m", "trainer", "run", args.config, "--out", str(run),
           "--set", f"train.time_limit_minutes={args.minutes}", *sum((["--set", s] for s in args.set), [])]
    if resume:
        cmd.append("--resume")
    print("train:", " ".join(cmd), flush=True)
    t0 = time.time()
    stop = threading.Event()
    worker = None
    if args.bench:
        worker = threading.Thread(target=evaluator, args=(run, args, stop), daemon=True)
    with (OUT / f"train_{run.name}.log").open("a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        if worker is not None:
            while not (run / "config.yaml").is_file() and proc.poll() is None:
                time.sleep(1)
            worker.start()
        rc = proc.wait()
    stop.set()
    if worker is not None:
        worker.join(timeout=max(10, args.deadline - (time.time() - t0)))
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").is_file() else []
    steps = max((r["step"] for r in rows), default=0)
    emit("train", {"rc": rc, "resumed": resume, "seconds": round(time.time() - t0, 1), "last_step": steps,
                   "checkpoints": sorted(p.name for p in (run / "checkpoints").glob("step-*")) if (run / "checkpoints").is_dir() else []})
    curve(rows)


def curve(rows: list[dict], block: int = 5) -> None:
    """Per-step signals averaged over blocks of ``block`` steps."""
    names = ("reward_mean", "accuracy", "valid_rate", "response_length", "truncated_frac", "zero_variance_groups",
             "step_seconds", "gen_seconds", "update_seconds", "rollout_tokens_per_s", "entropy", "kl")
    by_step: dict[int, dict] = {}
    for r in rows:
        for k, v in r.items():
            if k in names and isinstance(v, (int, float)):
                by_step.setdefault(r["step"], {})[f"{r['role']}/{k}"] = v
    steps = sorted(by_step)
    for i in range(0, len(steps), block):
        chunk = steps[i:i + block]
        keys = sorted({k for s in chunk for k in by_step[s]})
        emit("curve", {"steps": f"{chunk[0]}-{chunk[-1]}",
                       **{k: round(sum(by_step[s][k] for s in chunk if k in by_step[s]) /
                                   sum(k in by_step[s] for s in chunk), 3) for k in keys}})


def cmd_eval(args) -> None:
    stop = threading.Event()
    stop.set()
    evaluator(Path(args.run), args, stop)


def cmd_pack(args) -> None:
    """The run folder without weights ($OUT/<run name>/...): what import_run needs."""
    run = Path(args.run)
    dest = OUT / run.name
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "metrics.jsonl", "evals.jsonl", "crossplay.json", "crossplay_tasks.jsonl",
                 "checkpoints.jsonl"):
        if (run / name).is_file():
            shutil.copy(run / name, dest / name)
    samples = run / "samples.jsonl"
    if samples.is_file():  # at most ~12 MB of samples come back
        with samples.open() as src, (dest / "samples.jsonl").open("w") as out:
            size = 0
            for line in src:
                size += len(line)
                if size > 12_000_000:
                    break
                out.write(line)
    emit("pack", {"files": sorted(p.name for p in dest.iterdir())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train")
    p.add_argument("config")
    p.add_argument("--run", required=True)
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--deadline", type=float, default=560, help="seconds after start by which evaluation gives up")
    for q in (p, e := sub.add_parser("eval")):
        q.add_argument("--bench", action="append", default=[])
        q.add_argument("--base", help="the base model when the run folder has no config.yaml yet")
        q.add_argument("--max-new-tokens", type=int, default=512)
        q.add_argument("--scoring", help="default: the benchmark's own (a JSONL: mcq where every item has choices, "
                       "math where every answer is a number, else exact)")
    e.add_argument("--run", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--run", required=True)
    args = parser.parse_args()
    {"train": cmd_train, "eval": cmd_eval, "pack": cmd_pack}[args.cmd](args)


if __name__ == "__main__":
    main()
