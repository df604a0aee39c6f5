#!/usr/bin/env bash
# CUDA-graph decode of HFGenerator: bench_decode (eager loop vs graph replay, agreement check),
# then the GRPO step (torch engine, packing, no prefix sharing) with graphs on and off.
#   run(command="bash benchmarks/gpu/run_decode.sh", carry=[".gpu_wheels", ".gpu_assets/smollm2-tokenizer"])
# About 4 minutes on an H200. Each part has its own timeout; the last lines summarise.
cd "$(dirname "$0")/../.."
source benchmarks/gpu/setup.sh || exit 1
STEP_GREP="^DECODE|HFGenerator:"
source benchmarks/gpu/steps.sh
step decode 200 benchmarks/gpu/bench_decode.py
step grpo_graphs 150 benchmarks/gpu/bench_grpo.py --engine torch --steps 5 --packing --no-share --tag graphs
step grpo_eager 150 benchmarks/gpu/bench_grpo.py --engine torch --steps 5 --packing --no-share --cuda-graphs off --tag eager
echo "== summary"
grep -h "^DECODE" "$OUT/decode.log"
grep -h '"bench": "grpo_step"' "$OUT/grpo_graphs.log" "$OUT/grpo_eager.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line.split("RESULT ", 1)[1])
    name, s, g, u = r["impl"], r["step_s"], r["gen_s"], r["update_s"]
    print(f"GRPO {name}: step {s:.2f} s (gen {g:.2f} s, update {u:.2f} s), {s / 7.06:.2f}x of TRL 7.06 s (RESULTS.md, machine 2)")
'
