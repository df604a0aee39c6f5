#!/usr/bin/env bash
# Where the update pass's time goes, and vLLM ours/bare (vLLM asked for no log-probs by default:
# `train.old_logprobs`), on an air-gapped GPU node. One phase per command, one after another (the node keeps /tmp
# from one command to the next until about 30 s after a command ends with no next one; a command takes 64 MiB of copied paths). Stage on the dev machine first:
# stage_wheels.sh, vllm_deps.sh + vllm_pack.sh.
#   a1     needs .gpu_wheels .gpu_assets/smollm2-tokenizer .gpu_vllm/p0: stage, then the update profile
#          (plain bf16 anchor + ours, DeepSpeed ZeRO-2, packed 8192 / 12288 tokens, kernel breakdown)
#   stage  needs .gpu_vllm/p1 (one vLLM part)
#   a3     needs .gpu_vllm/p2 .gpu_vllm/deps: vLLM unpacked; ours (no log-probs / log-probs) vs bare vLLM,
#          then the GRPO step with vLLM (the default reference: the trainer's log-probs)
#   mfu    (any later phase) update MFU variants: TOKENS (default 8192), COMPILE=1 for model.compile
#   b1     needs .gpu_wheels: update profile with model.compile, ZeRO-1 vs ZeRO-2 (no vLLM needed)
# One GPU, vLLM's sleep mode and compile in a whole GRPO run: `s1`, `stage` (as below), then
#   z3     needs .gpu_vllm/p2 .gpu_vllm/deps: GRPO with rollout.vllm_sleep; GRPO with vLLM + model.compile
# Two GPUs (vLLM's `separate` mode: the engine in its own process on GPU 1, weights by NCCL):
#   s1     needs .gpu_wheels .gpu_assets/smollm2-tokenizer .gpu_vllm/p0 (stage only); then `stage` with p1
#   s3     needs .gpu_vllm/p2 .gpu_vllm/deps: bench_vllm --mode separate, GRPO with vllm_mode separate
#          (plain, and under torchrun with one trainer rank)
#   e.g. `bash benchmarks/gpu/run_measure.sh a1` with the paths a1 needs copied to the node
cd "$(dirname "$0")/../.."
phase=${1:?phase}
source benchmarks/gpu/steps.sh
session_setup || exit 1
STEP_GREP="by_category"
case $phase in
  a1)
    step profile8k 240 benchmarks/gpu/profile_update.py --engine deepspeed --tokens 8192 --reps 3
    step profile12k 150 benchmarks/gpu/profile_update.py --engine deepspeed --tokens 12288 --reps 3 --no-anchor
    ;;
  stage) ;;
  a3)
    export VLLM_USE_FLASHINFER_SAMPLER=0
    step vllm 220 benchmarks/gpu/bench_vllm.py --reps 3
    step ours_vllm 150 benchmarks/gpu/bench_grpo.py --backend vllm --engine deepspeed --zero 2 --steps 5 --packing --no-share --tag "vllm+packed, trainer reference"
    ;;
  b1)
    step prof_compile 330 benchmarks/gpu/profile_update.py --engine deepspeed --tokens 8192 --reps 3 --no-anchor --compile
    step prof_zero1 150 benchmarks/gpu/profile_update.py --engine deepspeed --zero 1 --tokens 8192 --reps 3 --no-anchor
    ;;
  s1) ;;
  s3)
    export VLLM_USE_FLASHINFER_SAMPLER=0
    step vllm_sep 240 benchmarks/gpu/bench_vllm.py --reps 3 --mode separate --util 0.5
    step grpo_sep 170 benchmarks/gpu/bench_grpo.py --backend vllm --vllm-mode separate --engine deepspeed --zero 2 --steps 5 --packing --no-share --tag "vllm separate"
    step grpo_sep_torchrun 170 -m torch.distributed.run --nproc_per_node 1 benchmarks/gpu/bench_grpo.py --backend vllm --vllm-mode separate --engine deepspeed --zero 2 --steps 4 --packing --no-share --tag "vllm separate, torchrun"
    ;;
  z3)
    export VLLM_USE_FLASHINFER_SAMPLER=0
    step grpo_sleep 170 benchmarks/gpu/bench_grpo.py --backend vllm --vllm-sleep --engine deepspeed --zero 2 --steps 4 --packing --no-share --tag "vllm sleep"
    step grpo_compile 240 benchmarks/gpu/bench_grpo.py --backend vllm --compile --engine deepspeed --zero 2 --steps 5 --packing --no-share --tag "vllm + compile"
    ;;
  mfu)
    step "mfu${COMPILE:+_compile}_${TOKENS:-8192}" 300 benchmarks/gpu/profile_update.py --engine deepspeed \
      --tokens "${TOKENS:-8192}" --reps 3 --no-anchor ${COMPILE:+--compile}
    ;;
esac
python3 benchmarks/gpu/summarize.py 2>/dev/null | tail -25
