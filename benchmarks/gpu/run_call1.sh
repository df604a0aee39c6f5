#!/usr/bin/env bash
# Device call 1 (one GPU): stage, then every single-GPU measurement of the issue, each in its own
# process with its own time limit, logs under $OUT, the short table last.
#   run(command="bash benchmarks/gpu/run_call1.sh", carry=[".gpu_wheels", ".gpu_assets", ".gpu_vllm/p0"])
# It also parks the first vLLM part in /tmp (benchmarks/gpu/vllm_stage.sh) for the calls that follow.
cd "$(dirname "$0")/../.."
bash benchmarks/gpu/vllm_stage.sh
source benchmarks/gpu/setup.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
source benchmarks/gpu/steps.sh
step mfu 130 benchmarks/gpu/bench_update_mfu.py --reps 3
step ours 110 benchmarks/gpu/bench_grpo.py --engine torch --steps 5
step trl 140 benchmarks/gpu/bench_trl.py --steps 5
step ds 90 benchmarks/gpu/bench_ds_update.py --engine deepspeed --zero 2
step ds3 60 benchmarks/gpu/bench_ds_update.py --engine deepspeed --zero 3
step torch_eng 45 benchmarks/gpu/bench_ds_update.py --engine torch
python3 benchmarks/gpu/summarize.py
