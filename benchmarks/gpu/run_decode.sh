#!/usr/bin/env bash
# CUDA-graph decode of HFGenerator: bench_decode (eager loop vs graph replay, agreement check),
# then the GRPO step (torch engine, packing, no prefix sharing) with graphs on and off.
#   run(command="bash benchmarks/gpu/run_decode.sh", carry=[".gpu_wheels", ".gpu_assets/smollm2-tokenizer"])
# About 4 minutes on an H200. Each part has its own timeout; the last lines summarise.
cd "$(dirname "$0")/../.."
source benchmarks/gpu/setup.sh || exit 1
step() {  # step NAME SECONDS script args...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" python3 "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"
  grep -E "^RESULT|^DECODE|HFGenerator:|Error|error:" "$OUT/$name.log" | tail -12 | cut -c1-600
  [ $rc -ne 0 ] && tail -15 "$OUT/$name.log" | cut -c1-300
}
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
