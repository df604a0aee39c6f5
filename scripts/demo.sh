#!/usr/bin/env bash
# `make demo`: migrate, create the admin, load the corpus, start the web server and a worker,
# launch a small SPICE run on the CPU; Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PORT=${PORT:-8000}

$PY manage.py migrate --noinput -v 0
LOGIN=$($PY manage.py ensure_admin)
pids=()
cleanup() {
  echo; echo "stopping the web server and the worker..."
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

mkdir -p var/log
$PY manage.py serve --port "$PORT" > var/log/web.log 2>&1 & pids+=($!)
$PY manage.py rqworker cpu default --with-scheduler > var/log/worker.log 2>&1 & pids+=($!)
if [ -x scripts/demo_data.sh ]; then bash scripts/demo_data.sh; fi

# The demo run: a small SPICE run of SmolLM2-135M-Instruct on the CPU over the Wikipedia corpus
# (the worker above serves the cpu queue). Re-running `make demo` reuses an active demo run.
RUN_ID=$($PY manage.py launch spice --corpus wikipedia --model smollm2-135m-instruct --user admin \
  --queue cpu --reuse-active \
  --set train.device=cpu --set train.steps=50 --set train.prompts_per_step=2 \
  --set rollout.group_size=4 --set rollout.max_new_tokens=192 \
  --set spice.challenger_attempts=4 --set spice.challenger_group_size=4 --set spice.max_document_tokens=384 \
  --set checkpoint.every=5 2> var/log/launch.log) || RUN_ID=""

for _ in $(seq 1 60); do
  curl -fs -o /dev/null "http://127.0.0.1:$PORT/accounts/login/" && break
  sleep 0.5
done
echo
echo "  Selfplay is running at http://127.0.0.1:$PORT/"
echo "  $LOGIN"
if [ -n "$RUN_ID" ]; then
  echo "  demo SPICE run: http://127.0.0.1:$PORT/runs/$RUN_ID/ (starts when the worker has loaded the corpus)"
else
  echo "  the demo run was not launched: $(tail -n 3 var/log/launch.log)"
fi
echo "  logs: var/log/web.log, var/log/worker.log — Ctrl-C to stop"
echo
wait
