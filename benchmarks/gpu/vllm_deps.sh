#!/usr/bin/env bash
# Offline staging of vLLM for an air-gapped GPU node: run on the dev machine (with internet), from the repo root.
# Downloads the vLLM 0.24.0 wheel into .gpu_vllm/ and the dependency wheels the GPU image lacks into
# .gpu_vllm/deps/ (the list and pins: what vLLM 0.24.0 imports on top of the image; RESULTS.md "vLLM backend").
# Then `bash benchmarks/gpu/vllm_pack.sh` slims and splits the vLLM wheel into parts that each fit beside the working tree on the node.
set -euo pipefail
mkdir -p .gpu_vllm/deps
PIP=${PIP:-.venv/bin/pip}
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
   --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
   --platform manylinux2014_x86_64 --platform any"
ls .gpu_vllm/vllm-0.24.0-*.whl >/dev/null 2>&1 || $PIP download -q $P -d .gpu_vllm/ vllm==0.24.0
$PIP download -q $P -d .gpu_vllm/deps/ pyzmq msgspec blake3 cbor2 pybase64 setproctitle ijson diskcache lark \
  partial-json-parser python-json-logger compressed-tensors depyf astor 'openai>=2,<3' sniffio jiter distro \
  mistral-common gguf openai-harmony cachetools watchfiles interegular lm-format-enforcer 'fastapi<0.137' \
  starlette uvicorn python-multipart prometheus-fastapi-instrumentator llguidance==1.6.1 xgrammar==0.2.8 \
  apache-tvm-ffi==0.1.15 outlines-core
du -sh .gpu_vllm/deps; ls .gpu_vllm/deps | wc -l
