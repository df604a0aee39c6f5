"""Scale-out benchmark driver: the same SPICE run on 1, 2 and 4 GPUs of one host, run there from the repo root.

    python benchmarks/gpu/scale.py model                       # write /tmp/models/llama-1.5b once
    python benchmarks/gpu/scale.py run NAME GPUS [KEY=VALUE ...]  # one SPICE run, $OUT/NAME/
    python benchmarks/gpu/scale.py summary                     # the table, from $OUT/*/metrics.jsonl

A run is ``python -m trainer run benchmarks/gpu/spice_scale.yaml --gpus GPUS --out $OUT/NAME``
(the product's own command); its per-step metrics carry the costs the table reports: step
seconds, rollout and update tokens/s (all ranks together), and the step's share spent in
generation, weight sync and the update. Steps after the first are measured (median).
``resume_from=NAME`` copies that run's folder and continues it for one more step on GPUS.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "/tmp/bench_out"))
OUT.mkdir(parents=True, exist_ok=True)
CONFIG = ROOT / "benchmarks" / "gpu" / "spice_scale.yaml"


def make_model() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    import torch
    from common import make_model_dir

    t0 = time.time()
    path = make_model_dir("llama-1.5b", Path("/tmp/models/llama-1.5b"), dtype=torch.bfloat16)
    print(f"model {path} in {time.time() - t0:.0f}s", flush=True)


def run(name: str, gpus: int, overrides: list[str]) -> int:
    out = OUT / name
    resume = [o for o in overrides if o.startswith("resume_from=")]
    overrides = [o for o in overrides if not o.startswith("resume_from=")]
    args = [sys.executable, "-m", "trainer", "run", str(CONFIG), "--gpus", str(gpus), "--out", str(out)]
    done = 0
    if resume:
        src = OUT / resume[0].split("=", 1)[1]
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(src, out)
        done = max(json.loads(line)["step"] for line in (src / "metrics.jsonl").read_text().splitlines())
        args += ["--resume", "--set", f"train.steps={done + 1}"]
    for o in overrides:
        args += ["--set", o]
    t0 = time.time()
    with open(OUT / f"{name}.log", "w") as log:
        code = subprocess.call(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    (OUT / f"{name}.meta.json").write_text(json.dumps({"gpus": gpus, "overrides": overrides, "resume": resume,
                                                       "rc": code, "wall_s": round(time.time() - t0, 1),
                                                       "from_step": done}))
    print(f"== {name} gpus={gpus} rc={code} {time.time() - t0:.0f}s", flush=True)
    if code:
        print("".join(open(OUT / f"{name}.log").readlines()[-30:])[-4000:])
    return code


def summarize() -> list[dict]:
    rows = []
    for meta_path in sorted(OUT.glob("*.meta.json")):
        name = meta_path.name[: -len(".meta.json")]
        meta = json.loads(meta_path.read_text())
        metrics = OUT / name / "metrics.jsonl"
        if not metrics.is_file():
            rows.append({"run": name, "gpus": meta["gpus"], "rc": meta["rc"]})
            continue
        system = [m for m in map(json.loads, metrics.read_text().splitlines())
                  if m["role"] == "system" and m["step"] > meta.get("from_step", 0)]  # a resume: its own steps
        first = min(m["step"] for m in system)
        timed = [m for m in system if m["step"] > first] or system  # the first step warms up
        med = lambda key: statistics.median(m.get(key, 0.0) for m in timed)  # noqa: E731
        step = med("step_seconds")
        rows.append({"run": name, "gpus": meta["gpus"], "rc": meta["rc"], "steps": [m["step"] for m in system],
                     "step_s": round(step, 3), "rollout_tok_s": round(med("rollout_tokens_per_s")),
                     "update_tok_s": round(med("update_tokens_per_s")),
                     "gen_share": round(med("rollout_seconds") / step, 3),
                     "sync_share": round(med("weight_sync_seconds") / step, 3),
                     "update_share": round(med("update_seconds") / step, 3),
                     "rollout_tokens": med("rollout_tokens"), "update_tokens": med("update_tokens"),
                     "wall_s": meta["wall_s"]})
    base = {r["gpus"]: r["step_s"] for r in rows if "step_s" in r and r["run"].startswith("colocate")}
    for r in rows:
        if "step_s" in r and 1 in base:
            r["speedup"] = round(base[1] / r["step_s"], 2)
            r["efficiency"] = round(base[1] / r["step_s"] / r["gpus"], 2)
    with open(OUT / "scale_summary.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    keys = ["run", "gpus", "rc", "step_s", "speedup", "efficiency", "rollout_tok_s", "update_tok_s", "gen_share",
            "sync_share", "update_share"]
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(str(r.get(k, "-")) for k in keys))
    return rows


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "model":
        make_model()
    elif what == "run":
        sys.exit(run(sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
    else:
        summarize()
