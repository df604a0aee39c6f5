#!/usr/bin/env bash
# The vLLM call (after run_call1.sh and vllm_stage.sh calls on the SAME warm machine):
#   run(command="bash benchmarks/gpu/run_call3.sh", carry=[".gpu_vllm/p2", ".gpu_vllm/deps", ".gpu_assets"])
# (.gpu_wheels were installed into /tmp/site by run_call1.sh on this warm machine)
cd "$(dirname "$0")/../.."
rm -rf /tmp/site/openai /tmp/site/openai-3* /tmp/site/tvm_ffi /tmp/site/apache_tvm_ffi* /tmp/site/fastapi /tmp/site/fastapi-0.165*; bash benchmarks/gpu/vllm_stage.sh | tail -3
source benchmarks/gpu/setup.sh > /dev/null || exit 1
export VLLM_USE_FLASHINFER_SAMPLER=0  # flashinfer is not staged; torch/triton sampling instead
python3 -c "import vllm, vllm.entrypoints.llm; print('vllm', vllm.__version__)" 2>&1 | tail -4
source benchmarks/gpu/steps.sh
#step mfu 100 benchmarks/gpu/bench_update_mfu.py --reps 3
#step ds3 60 benchmarks/gpu/bench_ds_update.py --engine deepspeed --zero 3
#step torch_eng 45 benchmarks/gpu/bench_ds_update.py --engine torch
step vllm 150 benchmarks/gpu/bench_vllm.py --reps 3
step ours_vllm 120 benchmarks/gpu/bench_grpo.py --engine torch --backend vllm --steps 5
#step ds 60 benchmarks/gpu/bench_ds_update.py --engine deepspeed --zero 2
python3 benchmarks/gpu/summarize.py
