# Sourced by the phase scripts run_learn.sh and run_measure.sh: `step NAME SECONDS script args...` runs one benchmark
# script under a time limit, its output in $OUT/NAME.log, and prints its rc, seconds and RESULT lines
# (STEP_GREP adds patterns; on failure the log's tail).
step() {
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" python3 "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"
  grep -E "^RESULT|Error|error:${STEP_GREP:+|$STEP_GREP}" "$OUT/$name.log" | tail -12 | cut -c1-600
  [ $rc -ne 0 ] && tail -15 "$OUT/$name.log" | cut -c1-300
  return 0
}

# The start of every phase on the GPU node (run_learn.sh, run_measure.sh): the copied vLLM part
# (if any) staged, the copied wheels installed (benchmarks/gpu/setup.sh), the environment set.
session_setup() {
  bash benchmarks/gpu/vllm_stage.sh 2>/dev/null | tail -1
  source benchmarks/gpu/setup.sh > /tmp/setup.log 2>&1 || { cat /tmp/setup.log; return 1; }
  tail -2 /tmp/setup.log
  export SELFPLAY_DATA_DIR=/tmp/selfplay_data
}
