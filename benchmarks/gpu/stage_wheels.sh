#!/usr/bin/env bash
# Offline staging for an air-gapped GPU node: run on the dev machine (with internet), from the repository root.
# Builds/downloads the python 3.12 manylinux x86_64 wheels the GPU image lacks (DeepSpeed built with DS_BUILD_OPS=0,
# trl, datasets, pydantic, math-verify, gguf, ...) into .gpu_wheels/ (git-ignored, ~7 MiB) and SmolLM2's tokenizer
# into .gpu_assets/smollm2-tokenizer. Copy .gpu_wheels to the node with the first command; benchmarks/gpu/setup.sh
# installs it into /tmp/site there.
set -euo pipefail
mkdir -p .gpu_wheels .gpu_assets
DS_BUILD_OPS=0 .venv/bin/pip wheel --no-deps --no-build-isolation deepspeed==0.19.8 -w .gpu_wheels/
P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
   --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu_wheels/"
.venv/bin/pip download $P hjson pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing_extensions==4.16.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 \
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0
# SmolLM2's tokenizer files (~3.5 MB), exported from the bundled GGUF
HF_HUB_OFFLINE=1 .venv/bin/python -c "
from transformers import AutoTokenizer
from trainer.models import bundled_gguf
g = bundled_gguf('smollm2-135m-instruct')
AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name).save_pretrained('.gpu_assets/smollm2-tokenizer')"
du -sh .gpu_wheels .gpu_assets
