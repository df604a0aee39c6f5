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

for _ in $(seq 1 60); do
  curl -fs -o /dev/null "http://127.0.0.1:$PORT/accounts/login/" && break
  sleep 0.5
done
echo
echo "  Selfplay is running at http://127.0.0.1:$PORT/"
echo "  $LOGIN"
echo "  logs: var/log/web.log, var/log/worker.log — Ctrl-C to stop"
echo
wait
