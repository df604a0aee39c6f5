# Sourced by scripts/demo.sh and scripts/serve.sh: start background children with `pids+=($!)`, then
# `trap_children` stops them all when the script ends or is interrupted. A signal also ends the script: a handler
# that only returned let it go on (a TERM while the demo imported its example runs stopped the server, then the
# imports went on and the corpus loader started).
pids=()
stop_children() {
  trap - EXIT INT TERM
  echo; echo "stopping the web server and the workers..."
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # An RQ worker's first signal waits for its job (a training run takes hours); a second one, more than 1 s
  # later, stops the job too. The run is then failed (resumable) by the next start's reaper.
  sleep 2
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

trap_children() {
  trap stop_children EXIT
  trap 'stop_children; exit 130' INT
  trap 'stop_children; exit 143' TERM
}
