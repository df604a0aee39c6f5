"""A GPU run folder made small enough to ship in examples/runs/ (on the dev machine, after
session_learn.sh's runs.tgz is unpacked):

    python benchmarks/gpu/trim_run.py /tmp/gpu/runs/tta0 examples/runs/grpo-gsm8k-qwen05-tta-seed0

Keeps what ``manage.py import_run`` shows: config.yaml, metrics.jsonl, evals.jsonl, checkpoints.jsonl, the
cross-play files and TRL's arguments whole; samples.jsonl's first ``--samples-kb`` KB (whole lines); the per-item
evaluation samples (eval_samples/) of the base and of each benchmark's last checkpoint only (the paired
difference the run page shows for the final model), their question and output cut to ``--cut`` characters
(head and tail around " [...] "). Every other checkpoint keeps its evals.jsonl line (score and interval).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from trainer.runfolder import copy_head, eval_sample_files, read_evals  # noqa: E402

WHOLE = ("config.yaml", "metrics.jsonl", "evals.jsonl", "checkpoints.jsonl", "crossplay.json", "crossplay_tasks.jsonl",
         "trl_args.json")


def cut(text: str | None, n: int) -> str | None:
    if text is None or len(text) <= n:
        return text
    half = max(1, (n - 7) // 2)
    return text[:half] + " [...] " + text[-half:]


def trim(src: Path, dest: Path, samples_kb: int, n: int) -> dict:
    if not (src / "config.yaml").is_file():
        raise SystemExit(f"trim_run: {src} is not a run folder (no config.yaml)")
    if dest.resolve() == src.resolve() or dest.resolve() in src.resolve().parents:
        raise SystemExit(f"trim_run: {dest} is {src} or a folder above it; give a new folder")
    if dest.exists():
        if not (dest / "config.yaml").is_file():
            raise SystemExit(f"trim_run: {dest} exists and is not a run folder; remove it or give a new folder")
        shutil.rmtree(dest)  # an earlier trim of a run
    dest.mkdir(parents=True)
    for name in WHOLE:
        if (src / name).is_file():
            shutil.copy(src / name, dest / name)
    if (src / "samples.jsonl").is_file():
        copy_head(src / "samples.jsonl", dest / "samples.jsonl", samples_kb * 1000)
    last = {}
    for row in read_evals(src):
        last[row["benchmark"]] = max(last.get(row["benchmark"], 0), row["step"])
    kept = []
    for benchmark, step, path in eval_sample_files(src):
        if step not in (0, last.get(benchmark)):
            continue
        (dest / "eval_samples").mkdir(exist_ok=True)
        with path.open(encoding="utf-8") as f, (dest / "eval_samples" / path.name).open("w", encoding="utf-8") as out:
            for line in f:
                row = json.loads(line)
                for key in ("question", "output"):
                    if isinstance(row.get(key), str):
                        row[key] = cut(row[key], n)
                out.write(json.dumps(row) + "\n")
        kept.append(path.name)
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    return {"dest": str(dest), "eval_samples": kept, "kb": round(total / 1000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src")
    parser.add_argument("dest")
    parser.add_argument("--samples-kb", type=int, default=300)
    parser.add_argument("--cut", type=int, default=160, help="characters kept of each item's question and output")
    args = parser.parse_args()
    print(json.dumps(trim(Path(args.src), Path(args.dest), args.samples_kb, args.cut)))


if __name__ == "__main__":
    main()
