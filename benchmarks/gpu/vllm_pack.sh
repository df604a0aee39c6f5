#!/usr/bin/env bash
# Offline staging of vLLM for an air-gapped GPU node, on the dev machine, from the repo root (after vllm_deps.sh):
# slim the vLLM 0.24.0 wheel (drop FA2 kernels, MoE kernels, the Rust router
# and Blackwell/DeepGEMM sources: a dense Llama on Hopper uses none of them; each import is guarded in
# vLLM) with `zip -d` (no recompression: 279 MB -> 135 MB), split it into parts that each fit beside the working tree
# on the node (64 MiB of copied paths in all), one folder each (.gpu_vllm/p0 .. pN), and write
# benchmarks/gpu/vllm_manifest.txt ("SHA256 part00,part01,..."); on the node benchmarks/gpu/vllm_stage.sh joins them.
#   FIRST_MB: size of part00 (it goes with the first command, beside .gpu_wheels); REST_MB: the others.
#   Both plus the working tree (plus what rides along) must stay under 64 MiB, e.g. 40 / 40 with a 20 MiB tree.
set -euo pipefail
FIRST_MB=${FIRST_MB:-44}; REST_MB=${REST_MB:-55}
W=$(ls .gpu_vllm/vllm-0.24.0-*.whl)
cp "$W" /tmp/vllm_slim.whl
zip -q -d /tmp/vllm_slim.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/_moe_C_stable_libtorch.abi3.so' \
  'vllm/vllm-rs' 'vllm/third_party/fmha_sm100/*' 'vllm/third_party/deep_gemm/*'
rm -rf .gpu_vllm/p* && mkdir -p .gpu_vllm/p0
head -c $((FIRST_MB * 1048576)) /tmp/vllm_slim.whl > .gpu_vllm/p0/part00
tail -c +$((FIRST_MB * 1048576 + 1)) /tmp/vllm_slim.whl | split -b ${REST_MB}M -d -a 2 --numeric-suffixes=1 - /tmp/vpart
names=part00
for f in /tmp/vpart*; do n=${f#/tmp/vpart}; mkdir -p .gpu_vllm/p$((10#$n)); mv "$f" .gpu_vllm/p$((10#$n))/part$n; names="$names,part$n"; done
echo "$(sha256sum /tmp/vllm_slim.whl | cut -d' ' -f1) $names" > benchmarks/gpu/vllm_manifest.txt
cat benchmarks/gpu/vllm_manifest.txt; du -sh .gpu_vllm/p*
