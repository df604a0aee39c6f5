"""A learning run on a GPU node with the product's own commands, and its checkpoints evaluated as they
come. Run from the repository root after ``source benchmarks/gpu/setup.sh``:

    python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_grpo_gsm8k.yaml --run /tmp/runs/grpo \
        --minutes 8 --bench .gpu_assets/gsm8k_heldout.jsonl --set model.name_or_path=/tmp/models/q05
    python3 benchmarks/gpu/learn_run.py eval --run /tmp/runs/grpo --bench .gpu_assets/gsm8k_heldout.jsonl
    python3 benchmarks/gpu/learn_run.py pack --run /tmp/runs/grpo          # run folder (no weights) -> $OUT
    CUDA_VISIBLE_DEVICES=3 python3 benchmarks/gpu/learn_run.py watch --run /tmp/runs/a --run /tmp/runs/b \
        --keep /tmp/keep --until /tmp/runs/a.done --until /tmp/runs/b.done --bench .gpu_assets/gsm8k_heldout.jsonl

``train`` starts ``python -m trainer run CONFIG --out RUN`` (``--resume`` when RUN has a checkpoint) with
``train.time_limit_minutes`` so it stops with a checkpoint within its budget, and meanwhile evaluates the base
model (step 0) and every new checkpoint on ``--bench`` with ``trainer.evaluate`` (greedy, the CUDA-graph
decode, 95% bootstrap interval), on the same GPU. Results go to ``RUN/evals.jsonl`` (one line per
checkpoint and benchmark: step, checkpoint, benchmark, scoring, n, score, ci_low, ci_high, seconds, and
train_seconds = the run's summed step time at that checkpoint), the format ``manage.py import_run`` reads.
``watch`` does the evaluating for runs trained without ``--bench`` (ours, or trl_gsm8k.py's), on a GPU of its
own, so checkpoints can come every minute of training time (``checkpoint.every_minutes``) at no cost to training.
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

from trainer.runfolder import append_eval, copy_head, read_evals, write_eval_samples


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


def measure(spec: str, bench: str, max_new_tokens: int, scoring: str | None = None) -> tuple[dict, list[dict]]:
    """Greedy evaluation of one model on one benchmark: the evals.jsonl fields that do not depend on the run,
    and every item's sample."""
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
    return ({"checkpoint": spec, "benchmark": Path(bench).stem, "scoring": scoring, "n": result.n,
             "score": round(result.score, 4), "ci_low": round(result.ci_low, 4), "ci_high": round(result.ci_high, 4),
             "seconds": round(result.seconds, 1), "tokens_per_s": round(tokens / max(result.seconds, 1e-9)),
             "boxed_rate": round(boxed, 3)}, result.samples)


def record(run: Path, step: int, measured: tuple[dict, list[dict]]) -> dict:
    """Append a measured evaluation to RUN/evals.jsonl (checked against the format import_run reads,
    trainer/runfolder.py) and its items to RUN/eval_samples/ (the web's paired difference)."""
    fields, samples = measured
    row = append_eval(run, {"step": step, **fields,
                            "train_seconds": train_seconds_at(run, step) if step else 0.0})
    write_eval_samples(run, fields["benchmark"], step, samples)
    emit("eval", {"run": run.name, **row})
    return row


def eval_one(run: Path, step: int, spec: str, bench: str, max_new_tokens: int, scoring: str | None = None) -> dict:
    return record(run, step, measure(spec, bench, max_new_tokens, scoring))


def pending_checkpoints(run: Path, bench: str, folder: Path | None = None) -> list[tuple[int, Path]]:
    """Checkpoints in ``folder`` (default RUN/checkpoints) not yet evaluated on ``bench`` in RUN/evals.jsonl."""
    done = evaluated(run)
    out = []
    folder = folder or run / "checkpoints"
    for ckpt in sorted(folder.glob("step-*")) if folder.is_dir() else []:
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


def keep_checkpoints(run: Path, keep: Path, skip: set[int] = frozenset()) -> None:
    """Hard-link each new complete checkpoint's model (meta.json, config.yaml, model/; not the optimizer state) of
    RUN into KEEP/step-N as soon as it appears, so checkpoint.keep_last's pruning cannot take it before the
    watcher has evaluated it (and the disk holds the weights only)."""
    for ckpt in sorted((run / "checkpoints").glob("step-*")) if (run / "checkpoints").is_dir() else []:
        dest = keep / ckpt.name
        if dest.exists() or not (ckpt / "meta.json").is_file() or int(ckpt.name.split("-")[1]) in skip:
            continue
        tmp = keep / f".tmp-{ckpt.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            shutil.copytree(ckpt / "model", tmp / "model", copy_function=os.link)
            for name in ("config.yaml", "meta.json"):
                if (ckpt / name).is_file():
                    os.link(ckpt / name, tmp / name)
            os.replace(tmp, dest)
        except OSError as exc:  # pruned while linking: say so, go on
            shutil.rmtree(tmp, ignore_errors=True)
            emit("keep_error", {"run": run.name, "checkpoint": ckpt.name, "error": f"{type(exc).__name__}: {exc}"[:200]})


def cmd_watch(args) -> None:
    """Evaluate several runs' checkpoints on a GPU of their own (issue 22 item 3: the training GPUs only train):
    each run's base once per distinct base model (the row and samples copied to every run of that base), then
    every checkpoint, oldest first, until every --until file exists and nothing is left (or --deadline)."""
    runs, keep = [Path(r) for r in args.run], Path(args.keep)
    measured: dict[tuple[str, str], tuple[dict, list[dict]]] = {}
    failed: set[tuple[Path, int, str]] = set()  # evaluated once, failed: not tried again
    t0 = time.time()
    linking, lock = threading.Event(), threading.Lock()

    def link_all() -> None:
        with lock:
            for run in runs:
                if (run / "config.yaml").is_file():
                    (keep / run.name).mkdir(parents=True, exist_ok=True)
                    done = [{s for s, b in evaluated(run) if b == Path(bench).stem} for bench in args.bench]
                    keep_checkpoints(run, keep / run.name, skip=set.intersection(*done))  # evaluated: not again

    def linker() -> None:  # every second, also while an evaluation runs (a checkpoint lives keep_last saves)
        while not linking.is_set():
            try:
                link_all()
            except Exception as exc:  # noqa: BLE001 - a full disk, say: report, keep trying
                emit("keep_error", {"error": f"{type(exc).__name__}: {exc}"[:200]})
            time.sleep(1)

    threading.Thread(target=linker, daemon=True).start()
    while time.time() - t0 < args.deadline:
        finished = all(Path(u).exists() for u in args.until)  # read before the scan: nothing can slip past
        if finished:
            link_all()  # the last checkpoints, written just before the --until files
        todo = []
        for run in runs:
            if not (run / "config.yaml").is_file():
                continue
            try:
                base = base_model(run, None)
                for bench in args.bench:
                    if (0, Path(bench).stem) not in evaluated(run):
                        todo.append((-1.0, run, 0, f"base:{base}" if not Path(base).is_dir() else base, bench))
                    for step, ckpt in pending_checkpoints(run, bench, keep / run.name):
                        todo.append(((ckpt / "meta.json").stat().st_mtime, run, step, str(ckpt), bench))
            except Exception as exc:  # noqa: BLE001 - a config.yaml read half-written: the next pass reads it again
                emit("scan_error", {"run": run.name, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
        todo = [t for t in todo if (t[1], t[2], t[4]) not in failed]
        if not todo:
            if finished:
                break
            time.sleep(2)
            continue
        _, run, step, spec, bench = min(todo, key=lambda t: t[0])
        key = (spec, bench)
        try:
            result = measured.get(key) if step == 0 else None
            result = result or measure(spec, bench, args.max_new_tokens, args.scoring)
            if step == 0:
                measured[key] = result
            record(run, step, result)
            done = evaluated(run)
            if step and all((step, Path(b).stem) in done for b in args.bench):
                shutil.rmtree(Path(spec), ignore_errors=True)  # evaluated: the kept links go (the disk is shared)
        except Exception as exc:  # noqa: BLE001 - one bad checkpoint must not end the others' evaluations
            emit("eval_error", {"run": run.name, "step": step, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            failed.add((run, step, bench))
    linking.set()
    left = [f"{r.name}:{c.name}" for r in runs for b in args.bench for _, c in pending_checkpoints(r, b, keep / r.name)]
    emit("watch", {"seconds": round(time.time() - t0, 1), "not_evaluated": left, "runs": {r.name: len(read_evals(r)) if r.is_dir() else 0
                                                                   for r in runs}})


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
        copy_head(samples, dest / "samples.jsonl", 12_000_000)
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
    w = sub.add_parser("watch")
    w.add_argument("--run", action="append", required=True, help="a run folder (repeat; one not there yet is waited for)")
    w.add_argument("--keep", required=True, help="where each checkpoint's model is hard-linked until evaluated "
                   "(on the runs' filesystem; removed once evaluated on every --bench)")
    w.add_argument("--until", action="append", required=True,
                   help="a file whose existence says a run has ended (repeat: the watcher ends when all exist)")
    w.add_argument("--deadline", type=float, default=1500, help="seconds after which the watcher gives up")
    w.add_argument("--bench", action="append", required=True)
    w.add_argument("--max-new-tokens", type=int, default=512)
    w.add_argument("--scoring")
    p = sub.add_parser("pack")
    p.add_argument("--run", required=True)
    args = parser.parse_args()
    {"train": cmd_train, "eval": cmd_eval, "watch": cmd_watch, "pack": cmd_pack}[args.cmd](args)


if __name__ == "__main__":
    main()
