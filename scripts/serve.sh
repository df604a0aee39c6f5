#!/usr/bin/env bash
# The product on one machine with no demo data: how a researcher runs it on their own GPU box, and how each
# container of docker/compose.yml starts its part (the same commands, the same environment variables).
#
#   scripts/serve.sh                  everything below on this machine; Ctrl-C stops it all
#   scripts/serve.sh web              migrations, the admin account (login printed), `manage.py serve`
#   scripts/serve.sh worker QUEUE...  `manage.py rqworker QUEUE...` (e.g. `worker gpu cpu`: training runs)
#
# "Everything" is the web server, a worker on gpu and cpu (training runs; a worker that serves gpu on a
# machine without an NVIDIA GPU says so in its log and on /runs/workers/), a worker on short and default
# with the scheduler (uploads, the run reaper) and one on evals (evaluations on the CPU), so none of those
# waits behind a training run or another. First, always: `manage.py services start` (the embedded Postgres + pgvector and Redis;
# nothing to do when DATABASE_URL / REDIS_URL name servers, as in docker/compose.yml).
# Knobs: HOST (default 127.0.0.1; 0.0.0.0 to serve other machines: also set ALLOWED_HOSTS), PORT (8000),
# PY (default .venv/bin/python if it exists, else python3), and the variables of the README's Configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3 || command -v python); fi
fi
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
role=${1:-all}
[ $# -gt 0 ] && shift

$PY manage.py services start

web_setup() {
  $PY manage.py migrate --noinput -v 0
  $PY manage.py ensure_admin
}

case "$role" in
  web)
    web_setup
    exec $PY manage.py serve --host "$HOST" --port "$PORT" ;;
  worker)
    [ $# -gt 0 ] || { echo "scripts/serve.sh worker: name the queues, e.g. 'scripts/serve.sh worker gpu cpu'" >&2; exit 2; }
    exec $PY manage.py rqworker "$@" ;;
  all)
    LOGIN=$(web_setup)
    LOG=${SELFPLAY_DATA_DIR:-var}/log
    mkdir -p "$LOG"
    source scripts/children.sh
    trap_children
    $PY manage.py serve --host "$HOST" --port "$PORT" > "$LOG/web.log" 2>&1 & pids+=($!)
    $PY manage.py rqworker gpu cpu > "$LOG/worker.log" 2>&1 & pids+=($!)
    $PY manage.py rqworker short default --with-scheduler > "$LOG/short.log" 2>&1 & pids+=($!)
    $PY manage.py rqworker evals > "$LOG/evals.log" 2>&1 & pids+=($!)
    URL="http://$HOST:$PORT"
    for _ in $(seq 1 120); do
      curl -fs -o /dev/null "$URL/accounts/login/" 2>/dev/null && break
      sleep 0.5
    done
    echo
    echo "  Selfplay is running at $URL/  (log in at $URL/accounts/login/)"
    echo "  $LOGIN"
    echo "  workers and their GPUs: $URL/runs/workers/   launch a run: $URL/runs/new/"
    echo "  logs: $LOG/web.log, $LOG/worker.log (runs), $LOG/short.log (uploads, the reaper), $LOG/evals.log (evaluations) — Ctrl-C to stop"
    wait ;;
  *)
    echo "scripts/serve.sh: unknown part '$role' (expected nothing, 'web' or 'worker QUEUE...')" >&2
    exit 2 ;;
esac
