#!/usr/bin/env bash
# Offline staging of vLLM on an air-gapped GPU node (the wheel is larger than the 64 MiB a command may take), one part per command,
# from the repo root:
#   bash benchmarks/gpu/vllm_stage.sh        (each command comes with one folder .gpu_vllm/pN/ holding partN)
# Parts accumulate in /tmp/vllm_parts (the node keeps /tmp from one command to the next while it stays up). When every part named in
# benchmarks/gpu/vllm_manifest.txt is there and the sha256 matches, the slimmed vLLM 0.24.0 wheel is
# unpacked into /tmp/site and the dependency wheels copied in .gpu_vllm/deps/ are installed there.
# Prints "VLLM_STAGED" when vLLM is in place. Build the parts on the dev machine with benchmarks/gpu/vllm_pack.sh.
mkdir -p /tmp/vllm_parts /tmp/site
for f in .gpu_vllm/p*/part*; do [ -f "$f" ] && cp -n "$f" /tmp/vllm_parts/; done
read -r SUM PARTS < <(head -1 benchmarks/gpu/vllm_manifest.txt)
have=$(ls /tmp/vllm_parts | wc -l); want=$(echo "$PARTS" | tr ',' '\n' | wc -l)
echo "vllm_stage: $have/$want parts: $(ls /tmp/vllm_parts | tr '\n' ' ')"
if [ ! -d /tmp/site/vllm ] && [ "$have" -ge "$want" ]; then
  got=$(for p in $(echo "$PARTS" | tr ',' ' '); do cat /tmp/vllm_parts/$p; done | sha256sum | cut -d' ' -f1)
  if [ "$got" != "$SUM" ]; then echo "vllm_stage: CHECKSUM MISMATCH ($got != $SUM)"; exit 3; fi
  for p in $(echo "$PARTS" | tr ',' ' '); do cat /tmp/vllm_parts/$p; done > /tmp/vllm_slim.whl
  python3 -m zipfile -e /tmp/vllm_slim.whl /tmp/site || exit 4
fi
if ls .gpu_vllm/deps/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu_vllm/deps/*.whl 2>&1 | tail -2
fi
[ -d /tmp/site/vllm ] && echo VLLM_STAGED
exit 0
