#!/usr/bin/env bash
# A cold machine: stage (wheels + first vLLM part), then the single-GPU runs that need no vLLM.
#   run(command="bash benchmarks/gpu/run_callA.sh", carry=[".gpu_wheels", ".gpu_assets", ".gpu_vllm/p0"])
cd "$(dirname "$0")/../.."
bash benchmarks/gpu/vllm_stage.sh 2>/dev/null | tail -1
source benchmarks/gpu/setup.sh || exit 1
source benchmarks/gpu/steps.sh
step mfu_ds 100 benchmarks/gpu/bench_update_mfu.py --engine deepspeed --only dense,packed --reps 3
step ours_pack 90 benchmarks/gpu/bench_grpo.py --engine torch --steps 4 --packing --no-share --tag packed
step ours_ds 100 benchmarks/gpu/bench_grpo.py --engine deepspeed --zero 2 --steps 4 --packing --no-share --tag packed
step trl 110 benchmarks/gpu/bench_trl.py --steps 5
python3 benchmarks/gpu/summarize.py
