#!/usr/bin/env bash
# `make demo`: migrate, create the admin, start the web server and three workers (queues cpu; short and
# default; evals), print the login as soon as the login page answers, then load the corpus, launch a
# small SPICE run on the CPU and import the example runs.
# DEBUG stays off (its default): only localhost is served, over plain HTTP (docs/SECURITY.md).
# Ctrl-C stops everything this script started. Knobs: PORT (default 8000), SELFPLAY_DATA_DIR
# (default ./var; logs go to its log/), REDIS_URL / DATABASE_URL (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PORT=${PORT:-8000}
LOG=${SELFPLAY_DATA_DIR:-var}/log
URL="http://127.0.0.1:$PORT"

# A port already taken (a `make demo` still running, say) would leave this one's web server dead while the
# lines below claim it runs: refuse before starting anything.
if ! $PY -c "import errno, socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(('127.0.0.1', int(sys.argv[1])))
except OSError as e: sys.exit(1 if e.errno == errno.EADDRINUSE else 0)  # other problems: the server says them" \
    "$PORT" 2> /dev/null; then
  echo "make demo: port $PORT is in use (is a \`make demo\` already running? $URL/ would be it):" \
       "stop that one, or pick another port: PORT=$((PORT + 1)) make demo" >&2
  exit 1
fi
$PY manage.py migrate --noinput -v 0
LOGIN=$($PY manage.py ensure_admin)
source scripts/children.sh
trap_children

mkdir -p "$LOG"
$PY manage.py serve --port "$PORT" > "$LOG/web.log" 2>&1 & pids+=($!)
# Three workers on 2 cores, each for one kind of job, so none waits behind another: training runs (cpu);
# short jobs (short: uploads) and housekeeping (default, with the scheduler for the run reaper);
# evaluations and cross-play (evals). Only the demo run computes most of the time: the other two sleep
# on Redis until a job comes.
$PY manage.py rqworker cpu > "$LOG/worker.log" 2>&1 & pids+=($!)
$PY manage.py rqworker short default --with-scheduler > "$LOG/short.log" 2>&1 & pids+=($!)
$PY manage.py rqworker evals > "$LOG/evals.log" 2>&1 & pids+=($!)

for _ in $(seq 1 120); do
  curl -fs -o /dev/null "$URL/accounts/login/" && break
  sleep 0.5
done
echo
echo "  Selfplay is running at $URL/  (log in at $URL/accounts/login/)"
echo "  $LOGIN"
echo "  logs: $LOG/web.log, $LOG/worker.log (runs), $LOG/short.log (uploads), $LOG/evals.log (evaluations), $LOG/loader.log — Ctrl-C to stop"
echo

# The corpus: the first 1,000 Wikipedia summaries now (the run needs documents), the rest later.
if [ -x scripts/demo_data.sh ]; then bash scripts/demo_data.sh now; fi

# A demo run left "running" by an earlier Ctrl-C is failed first (no heartbeat), so a fresh one starts.
$PY manage.py reap_runs > /dev/null 2>&1 || true
# The demo run: a small SPICE run of SmolLM2-135M-Instruct on the CPU over the Wikipedia corpus
# (the first worker serves the cpu queue). Re-running `make demo` reuses an active demo run.
# Sized for 2 cores: one document a step, 2 Challenger attempts (a 96-token format turn + 128
# tokens) and 2 Reasoner answers of 128 tokens, at most 704 generated tokens a step; the 50-step
# demo before generated 5,120 and took about 4.5 min a step, so this one should take about a
# minute on 2 free cores (not re-measured on a free machine: README). spice.require_grounding is off
# here: SmolLM2-135M's few parsable tasks are almost never about their document (all 3 of a 20-step
# demo run were refused by it), which would leave the Reasoner nothing to answer; the rule is on by
# default, for capable models. SmolLM2-135M writes task JSON only when the task turn opens with it
# (spice.think_before_task off) and its consensus reader answers in 64 tokens on the CPU.
RUN_ID=$($PY manage.py launch spice --corpus wikipedia --model smollm2-135m-instruct --user admin \
  --queue cpu --reuse-active \
  --set train.device=cpu --set train.steps=30 --set train.prompts_per_step=1 \
  --set rollout.group_size=2 --set rollout.max_new_tokens=128 --set train.micro_batch_size=4 \
  --set spice.challenger_attempts=2 --set spice.challenger_group_size=2 --set spice.max_document_tokens=256 \
  --set spice.format_max_new_tokens=96 --set spice.worked_example=true --set spice.require_grounding=false \
  --set spice.think_before_task=false --set gate.consensus_max_new_tokens=64 \
  --set checkpoint.every=5 2> "$LOG/launch.log") || RUN_ID=""
if [ -n "$RUN_ID" ]; then
  echo "  demo SPICE run: $URL/runs/$RUN_ID/ (a small SPICE run on the CPU; the run page times its steps)"
else
  echo "  the demo run was not launched: $(tail -n 3 "$LOG/launch.log")"
fi

# Example runs: every run folder under examples/runs/ (GPU runs' metrics, samples and checkpoint
# evaluations, no weights) is imported (manage.py import_run); again on a later `make demo`, in place.
for dir in examples/runs/*/; do
  [ -f "$dir/config.yaml" ] || continue
  if line=$($PY manage.py import_run "$dir" --user admin 2>> "$LOG/import.log"); then
    echo "  example run $(basename "$dir"): $URL$(echo "${line##*(}" | tr -d ')')"
  else
    echo "  example run $dir not imported: $(tail -n 1 "$LOG/import.log")"
  fi
done

# The other ~9,000 summaries, after the run is queued: a niced process of its own (progress on
# /corpora/), so neither the run nor a short job waits for it.
if [ -x scripts/demo_data.sh ]; then
  nice -n 10 bash scripts/demo_data.sh background > "$LOG/loader.log" 2>&1 & pids+=($!)
fi
echo
wait
