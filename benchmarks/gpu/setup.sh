# Source on the air-gapped GPU node, from the repository root:  source benchmarks/gpu/setup.sh
# Installs the copied wheels (.gpu_wheels/, built/downloaded offline by benchmarks/gpu/stage_wheels.sh)
# into /tmp/site without touching the image's packages, and sets the environment (offline Hugging Face, $OUT).
# Once per node while it is held: a later command with the same wheels skips the install, so jobs that are still
# running never see their packages replaced under them.
WHEELS_ID=$(ls .gpu_wheels/*.whl 2>/dev/null | md5sum | cut -c1-12)
if [ -f /tmp/site/.wheels-$WHEELS_ID ]; then
  :
elif ls .gpu_wheels/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu_wheels/*.whl \
    || { echo "setup: wheel install failed"; return 1 2>/dev/null || exit 1; }
  touch /tmp/site/.wheels-$WHEELS_ID
elif [ ! -d /tmp/site/deepspeed ]; then
  echo "setup: no .gpu_wheels copied and nothing in /tmp/site (a fresh node): copy .gpu_wheels to the node"; return 1 2>/dev/null || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# NVLink multicast off for NCCL, torch symmetric memory and NVSHMEM, as the GPU hosts require
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OUT=${OUT:-/tmp/bench_out}; mkdir -p "$OUT"
python3 - <<'PY'
import importlib, torch, transformers
mods = ["deepspeed", "trl", "datasets", "pydantic", "math_verify", "hjson", "yaml", "gguf", "trainer.runner", "trainer.packing"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as e:  # report, keep going: each benchmark says what it needs
        bad.append(f"{m}: {type(e).__name__}: {e}")
print(f"setup: torch {torch.__version__} cuda {torch.version.cuda} gpus {torch.cuda.device_count()} "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}; transformers {transformers.__version__}")
print("setup: import problems: " + ("; ".join(bad) if bad else "none"))
PY
