#!/usr/bin/env bash
# The GRPO-step measurements against TRL and the SPICE Learn run on SmolLM2-135M (benchmarks/gpu/learn.py), on an
# air-gapped GPU node: one phase per command, one after another (the node keeps /tmp from one command to the next until about 30 s after
# a command ends with no next one; a command takes 64 MiB of copied paths), e.g. c1, graphs, stage, c3, gguf, train, eval. Stage on the dev
# machine first: stage_wheels.sh, learn_assets.sh, vllm_deps.sh + vllm_pack.sh.
#   c1     needs .gpu_wheels .gpu_assets/smollm2-tokenizer .gpu_assets/wiki.jsonl .gpu_vllm/p0:
#          stage, then TRL's GRPO step (the anchor of every ratio) and the update MFU with 16k-token packed
#          micro-batches
#   stage  needs .gpu_vllm/p1 (one vLLM part)
#   c3     needs .gpu_vllm/p2 .gpu_vllm/deps: vLLM unpacked; ours vs bare vLLM, GRPO step with vLLM
#   gguf   needs .gpu_assets/gguf1 .gpu_assets/wiki_heldout.jsonl .gpu_assets/gsm8k_test.jsonl (first GGUF half, eval sets)
#   train  needs .gpu_assets/gguf2: SmolLM2 imported, the SPICE Learn run (MINUTES, default 7.5)
#   eval   cross-play matrix + held-out cloze + GSM8K, base vs checkpoints
#   graphs decode eager vs CUDA graphs, GRPO step ours (hf backend, graphs) - compared with c1's TRL
#   e.g. `bash benchmarks/gpu/run_learn.sh c1` with the paths c1 needs copied to the node
cd "$(dirname "$0")/../.."
phase=${1:?phase}
source benchmarks/gpu/steps.sh
session_setup || exit 1
case $phase in
  c1)
    step trl 170 benchmarks/gpu/bench_trl.py --steps 5
    step mfu16k 110 benchmarks/gpu/bench_update_mfu.py --engine deepspeed --only packed --tokens 16384 --reps 3
    ;;
  graphs)
    step decode 120 benchmarks/gpu/bench_decode.py
    step ours_hf_graphs 150 benchmarks/gpu/bench_grpo.py --engine deepspeed --zero 2 --steps 4 --packing --no-share --cuda-graphs on --tag "packed+graphs"
    ;;
  stage) ;;
  c3)
    export VLLM_USE_FLASHINFER_SAMPLER=0
    step vllm 200 benchmarks/gpu/bench_vllm.py --reps 3
    step ours_vllm 150 benchmarks/gpu/bench_grpo.py --backend vllm --engine deepspeed --zero 2 --steps 5 --packing --no-share --tag "vllm+packed"
    ;;
  gguf) python3 benchmarks/gpu/learn.py model ;;
  train)
    export VLLM_USE_FLASHINFER_SAMPLER=0
    python3 benchmarks/gpu/learn.py model || exit 1
    python3 benchmarks/gpu/learn.py train --minutes "${MINUTES:-7.5}"
    tail -5 "$OUT/learn_train.log" | cut -c1-300
    ;;
  eval)
    export VLLM_USE_FLASHINFER_SAMPLER=0
    timeout 560 python3 benchmarks/gpu/learn.py eval > "$OUT/learn_eval.log" 2>&1; echo "eval rc=$?"
    grep -E "^RESULT" "$OUT/learn_eval.log" | cut -c1-400 | tail -30
    grep -E "Error|error" "$OUT/learn_eval.log" | tail -5
    ;;
esac
python3 benchmarks/gpu/summarize.py 2>/dev/null | tail -25
