#!/usr/bin/env bash
# Offline staging and detached learning jobs on an air-gapped multi-GPU node (no internet). Each command runs on
# the node from the repository root, with a copy of the working tree plus at most 8 git-ignored paths copied with it,
# 64 MiB in all, for at most 10 minutes; the node keeps /tmp from one command to the next while it stays up, and is
# freed about 30 s after a command ends with no next one. So the Qwen GGUFs (0.5-1.1 GB) and vLLM travel in parts, and the runs start
# DETACHED (setsid): they outlive the command that starts them, so staging, runs and evaluations overlap and no run is
# cut at 10 minutes. From the first `join` on, keep a `watch` running at all times: a freed node takes its
# detached jobs with it. Phases, one per command:
#   bundle (dev machine) gather .gpu_assets/*.jsonl and .gpu_assets/smollm2-tokenizer into .gpu_assets/first (a command
#                      takes 8 paths at most; the vLLM benchmarks need the tokenizer, so it goes with the first one)
#   first              needs .gpu_wheels and .gpu_assets/first: wheels into /tmp/site, the assets into .gpu_assets/
#   part               needs the next model part folder (.gpu_assets/stage/<model>/pNN; one part of each of two models
#                      fits): parked in /tmp/gguf_parts
#   vpart              needs the next vLLM part (.gpu_vllm/pN, then .gpu_vllm/deps): benchmarks/gpu/vllm_stage.sh
#   join MODEL [JOB..] check + import a staged model into /tmp/models/MODEL, then start JOBs (detached); a join
#                      that brings parts too (its model's last, the next model's first) parks them first:
#                      `python3 benchmarks/gpu/stage_gguf.py collect && bash benchmarks/gpu/session_learn.sh join ...`
#   start JOB...       start jobs in the background (see `chain` below); MIN=13 (env) = a run's training minutes;
#                      a job as NAME:SEED runs with that seed in folder NAME-sSEED (gm:2 gm:3: two seeds at once), and
#                      NAME@GPU on that card (sc@0), e.g. `join MODEL gm:2 gm:3 gmc:2 gmc:3 sc@0 scc@1`
#   stop JOB...        stop a job gone wrong (a run's own time limit is what ends it with a checkpoint)
#   watch SECS         wait SECS while the jobs run (less once all have ended); then status, curves and the packed
#                      run folders in $OUT
# On the dev machine first: benchmarks/gpu/stage_wheels.sh, learn_assets.sh, gsm8k_split.py, then `bundle`;
# `python benchmarks/gpu/stage_gguf.py split MODEL` for each model; for vLLM, vllm_deps.sh then vllm_pack.sh
# (FIRST_MB / REST_MB: parts that fit beside the working tree, e.g. 40 / 40 with a 20 MiB tree).
# Optional: .gpu_code, a snapshot of the committed tree (see `job`), copied with the first join or start, becomes
# /tmp/code, the code every job runs, so a later command's working tree never changes a running job's modules.
# Fewer parts: `stage_gguf.py split` sizes the parts to what the working tree leaves of 64 MiB, and the tree's
# largest items are the example runs (~25 MiB) and plotly (~4.6 MiB), which no job on the node needs. Moved out of the
# tree while staging, the parts grow from 28 to 57 MiB and the 1.5B takes 19 parts instead of 39:
#   mkdir -p ../staging-aside && mv examples/runs static/vendor/plotly.min.js ../staging-aside/
#   python benchmarks/gpu/stage_gguf.py split qwen2.5-coder-1.5b-instruct      # split AFTER moving them
#   ... copy every part to the node ...
#   mv ../staging-aside/runs examples/ && mv ../staging-aside/plotly.min.js static/vendor/   # after the last part
# Keep them out until the last part has been copied: a part sized to the small tree no longer fits beside the full one.
# An order of phases (0.5B runs while the 1.5B is staged; the vLLM jobs wait for `vpart`):
#   first (with the 0.5B's p01 too: `split` makes p01 smaller for that) -> part (0.5B p02 .. its last but one)
#   -> `GRPO_MIN=10 TRL_MIN=10 join qwen2.5-coder-0.5b-instruct grpo05 trl05 grpo05s1 vllmb` (with the 0.5B's
#   last part and the 1.5B's p01) -> part (the 1.5B's next parts) ->
#   `MIN=13 join qwen2.5-coder-1.5b-instruct spice15 ssp15` (with its last part) -> vpart (each vLLM part, then
#   deps) -> watch 540 -> watch 540 ... until status shows every job ended (and which chains never started).
#   `split` prints how many parts each model takes.
# Afterwards, on the dev machine: benchmarks/gpu/trim_run.py makes each run folder small enough for examples/runs/.
cd "$(dirname "$0")/../.."
phase=${1:?phase}
if [ "$phase" = bundle ]; then  # dev machine, after learn_assets.sh, gsm8k_split.py and stage_wheels.sh
  rm -rf .gpu_assets/first && mkdir -p .gpu_assets/first
  cp .gpu_assets/*.jsonl .gpu_assets/first/ && cp -r .gpu_assets/smollm2-tokenizer .gpu_assets/first/
  du -sh .gpu_assets/first .gpu_wheels; exit
fi
if [ "$phase" = part ]; then python3 benchmarks/gpu/stage_gguf.py collect; exit; fi  # a staging phase: no setup
if [ "$phase" = vpart ]; then bash benchmarks/gpu/vllm_stage.sh 2>&1 | tee -a /tmp/vllm_stage.log | tail -3; exit; fi
source benchmarks/gpu/setup.sh > /tmp/setup.log 2>&1 || { cat /tmp/setup.log; exit 1; }
export SELFPLAY_DATA_DIR=/tmp/selfplay_data SELFPLAY_LOG=info
LOGS=/tmp/logs RUNS=/tmp/runs MODELS=/tmp/models
SMALL="--set rollout.max_new_tokens=512 --set spice.reasoner_max_new_tokens=512"  # 1,024 ran the 1.5B out of memory
mkdir -p $LOGS $RUNS $MODELS
Q15=$MODELS/qwen2.5-coder-1.5b-instruct Q05=$MODELS/qwen2.5-coder-0.5b-instruct
A=$PWD/.gpu_assets
export LOGS RUNS MODELS Q15 Q05 A SMALL

detach() {  # detach NAME GPU command...: runs on after this command returns; its log in $LOGS/NAME.log
  local name=$1 gpu=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu OUT=$LOGS/$name setsid nohup "$@" > $LOGS/$name.log 2>&1 < /dev/null &
  echo "$!" > $LOGS/$name.pid
  echo "started $name on GPU $gpu (pid $!)"
}

# One chain of jobs per GPU of a 4-GPU node (on a 2-GPU node a job's GPU is its number modulo 2; GPU=N overrides);
# each chain runs its steps in order, detached:
#   spice15  (GPU 0): SPICE on the 1.5B over Wikipedia for $MIN minutes, then spice_eval.py (cross-play base vs
#                     the last checkpoint on held-out documents, GSM8K, cloze)
#   grpo05   (GPU 1): ours, GRPO on GSM8K items 0-659 for $GRPO_MIN minutes, checkpoints evaluated on 660-1318
#   grpo05s1 (GPU 1, after grpo05): the same with seed 1 (seed-to-seed noise)
#   ssp15    (GPU 3): SSP on the 1.5B for $MIN minutes, then ssp_eval.py on held-out cloze items with search (and on
#                     held-out Proposer questions where sspq made them)
#   trl05    (GPU 2): TRL GRPOTrainer on GSM8K items 0-659 for $TRL_MIN minutes, checkpoints evaluated on 660-1318
#   vllmb    (GPU 2, after trl05 and once vLLM is staged): TRL with vLLM colocate vs ours with vLLM, 321M shape
#   sspq     (GPU 3): ssp_eval.py make-questions with the base 1.5B for $SSPQ_MIN minutes
#   spicem15 (GPU 3, after sspq): SPICE on the 1.5B over the GSM8K-solutions corpus (items 0-659) for $MATH_MIN
#                     minutes, then cross-play on documents 660-1318 and GSM8K items 660-1318
# Time to accuracy, with checkpoints at fixed training times:
#   tta0, tta1 (GPU 0, 1): ours, seeds 0 and 1, $TTA_MIN minutes, a checkpoint every minute of training time
#   ttatrl     (GPU 2):    TRL GRPOTrainer, the same budget, a checkpoint every 60 s of training time
#   ttaeval    (GPU 3):    learn_run.py watch: evaluates every checkpoint of the tta runs as it comes, on a GPU of
#                          its own (the training GPUs only train); ends when every run in $TTA_RUNS has ended
#   tta2       (GPU 1, after tta1): ours, seed 2, $TTA2_MIN minutes (a third seed over the early part of the curve)
#   ttav       (GPU 0, after tta0 and once vLLM is staged): ours with rollout.backend=vllm for $TTAV_MIN minutes
#   vllmb      (GPU 2) then runs after ttatrl
#   e.g. `TTA_MIN=10 TTA2_MIN=5 TTAV_MIN=6 join qwen2.5-coder-0.5b-instruct tta0 tta1 ttatrl ttaeval tta2 ttav vllmb`
# The task gate beside random-reward controls, Qwen2.5-Coder-1.5B (on a 2-GPU node gs / gm / sg share card 0 and
# their controls gsc / gmc / sgc card 1; SEED=N sets the seed of the SPICE ones):
#   (XSET="key=value ...": more --set for the SPICE jobs gs gsc gm gmc gr grc, e.g. XSET="train.kl_coef=0.02";
#   STEPS=N: each run stops after N steps, MIN minutes its cap: a run and its control the same length in steps;
#    by minutes alone a control beside fewer co-tenants runs more steps: 15 against 11-12 on 2026-11-29)
#   gs, gsc    SPICE over Wikipedia, then spice_eval (cross-play, GSM8K, cloze)
#   gm, gmc    SPICE over GSM8K items 0-659 (problem + worked solution as documents), then GSM8K items 660-1318
#   gr, grc    gs, gsc with gate.recall on (numeric questions that give no number refused; the Challenger told so):
#              SEED=3 MIN=12 join qwen2.5-coder-1.5b-instruct gr grc (one H200: both on the card)
#   sg, sgc    SSP over Wikipedia, then the Solver on 300 held-out cloze items with search
# SCOPE, SCORE, pi-Play on Qwen2.5-Coder-1.5B, each beside its random-reward control: on 4 cards so (SCORE: full
# fine-tune + KL reference, the heaviest, est. ~40-45 GB) has card 0 alone and soc card 1, the LoRA runs pair up:
# sc + pp on card 2, scc + ppc on card 3 (each run and its control: other cards, the same co-tenant). Each trains
# $MIN minutes, then benchmarks/gpu/method_eval.py measures base vs the last checkpoint on items built from
# wiki_heldout.jsonl only (seeded: the same files for a run and its control):
#   sc, scc    SCOPE (learn_scope.yaml): 200 open-ended tasks graded rubric by rubric by the frozen base
#              (scope-open), then 300 cloze items answered with search (scope-cloze)
#   so, soc    SCORE (learn_score.yaml): reports on 200 held-out queries, a fixed 5-criterion rubric, frozen-base
#              grader (score-reports)
#   pp, ppc    pi-Play (learn_piplay.yaml): 200 2-hop bridge questions, answered with search (piplay-multihop)
#   e.g. `MIN=12 join qwen2.5-coder-1.5b-instruct sc scc so soc pp ppc` (4 cards), then watch
# Rules for the 1.5B jobs (gs..sgc, sc..ppc):
#   - at most TWO 1.5B runs to a card, even a 140 GB H200: with three, the third runs out of memory in its update;
#     on 2 cards start one method pair at a time. Steps of two runs sharing an H200: SCOPE 107-140 s, pi-Play 34-97 s.
#   - one checkpoint per run, its last (checkpoint.every=0): a 1.5B checkpoint with its optimizer state is ~18 GB,
#     and four runs checkpointing every 10 steps fill the node's disk before their final checkpoints.
# ovl (GPU 1) needs only `first` (wheels + SmolLM2 tokenizer), so it can use a card while the model parts are staged.
# spice05 / speval15 / speval05 / sspeval15 run one step on its own (GPU=N to choose).
# sorg: SCORE's recorded held-out reports graded again with the fixed parser (after the 1.5B's import: `start sorg`).
# consn (after gs, or CONS_RUN=gm CONS_DOCS=$A/gsm8k_docs.jsonl): how many consensus readers the gate needs.
waitfor() {  # waitfor JOB: until JOB's process has ended
  while [ -f $LOGS/$1.pid ] && kill -0 "$(cat $LOGS/$1.pid)" 2>/dev/null; do sleep 5; done
}

spice_eval() {  # spice_eval RUN BASE [DOCS GSM8K NAME CLOZE TASKS]: cross-play base vs the last checkpoint, benchmarks
  python3 benchmarks/gpu/spice_eval.py --run $1 --models base:$2 "$(ls -d $1/checkpoints/step-* | tail -1)" \
    --docs ${3:-$A/wiki_heldout.jsonl} --tasks ${7:-${TASKS:-96}} --answers 4 --gsm8k ${4:-$A/gsm8k_test.jsonl} \
    --gsm8k-name ${5:-gsm8k_test} --cloze ${6:-300} --max-new-tokens 512
}

ssp_cloze() {  # ssp_cloze RUN_NAME: the Solver (base + checkpoints) on 300 held-out cloze items, with search
  # (the items are seeded, the same for every run; one file per run, as two runs may make them at once)
  python3 benchmarks/gpu/ssp_eval.py make-cloze --n 300 --out $A/ssp_cloze_$1.jsonl
  python3 benchmarks/gpu/ssp_eval.py eval --run $RUNS/$1 --bench $A/ssp_cloze_$1.jsonl --name ssp-cloze
}

vllm_benches() {  # the same 321M GRPO step (8 x 8 x 256 forced) four ways on one card; needs
                  # .gpu_assets/smollm2-tokenizer copied (the 321M model's tokenizer) and ~2 GB of free disk
  export VLLM_USE_FLASHINFER_SAMPLER=0
  python3 benchmarks/gpu/bench_trl.py --vllm
  python3 benchmarks/gpu/bench_grpo.py --backend vllm --tag "ours vllm defaults"
  python3 benchmarks/gpu/bench_trl.py
  python3 benchmarks/gpu/bench_grpo.py --tag "ours defaults"
}

chain() {  # the body of a detached job (runs in a child bash: functions exported below)
  local job=$1 name=${RUN_NAME:-$1} min=${MIN:-13}  # name: the run folder (gm-s3 for gm:3)
  case $job in
    spice15)
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_spice_qwen.yaml --run $RUNS/$name --minutes $min \
        --deadline 1500 --set train.micro_batch_tokens=${MBT:-4096} --set train.prompts_per_step=16 $SMALL \
        --set model.name_or_path=$Q15 --set corpus.path=$A/wiki.jsonl
      echo "== spice15 trained; evaluating"; spice_eval $RUNS/$name $Q15 ;;
    spice05)
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_spice_qwen.yaml --run $RUNS/$name --minutes $min \
        --deadline 1500 --set train.micro_batch_tokens=${MBT:-8192} --set train.prompts_per_step=16 $SMALL \
        --set model.name_or_path=$Q05 --set corpus.path=$A/wiki.jsonl
      echo "== spice05 trained; evaluating"; spice_eval $RUNS/$name $Q05 ;;
    spicem15)
      echo "== spicem15: waiting for sspq (same GPU)"; waitfor sspq
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_spice_qwen.yaml --run $RUNS/$name \
        --minutes ${MATH_MIN:-8} --deadline 1500 --set train.micro_batch_tokens=${MBT:-4096} \
        --set train.prompts_per_step=16 $SMALL --set model.name_or_path=$Q15 --set corpus.path=$A/gsm8k_docs.jsonl
      echo "== spicem15 trained; evaluating"
      spice_eval $RUNS/$name $Q15 $A/gsm8k_docs_heldout.jsonl $A/gsm8k_heldout.jsonl gsm8k_heldout 0 64 ;;
    ssp15)
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_ssp.yaml --run $RUNS/$name --minutes $min \
        --deadline 1500 --set train.micro_batch_tokens=4096 --set model.name_or_path=$Q15 --set corpus.path=$A/wiki.jsonl
      echo "== ssp15 trained; held-out cloze with search (no Proposer needed)"; ssp_cloze $name
      waitfor sspq  # held-out Proposer questions, where sspq made them
      [ -f $A/ssp_heldout.jsonl ] && python3 benchmarks/gpu/ssp_eval.py eval --run $RUNS/$name \
        --bench $A/ssp_heldout.jsonl --judged ;;
    grpo05|grpo05s1)  # ours, GRPO time to accuracy beside trl05 (the same kind of card),
                      # checkpoints every 20 steps evaluated as they come; grpo05s1 = a second seed, after grpo05
      local seed=0 gmin=${GRPO_MIN:-10}
      [ $job = grpo05s1 ] && { echo "== grpo05s1: waiting for grpo05 (same GPU)"; waitfor grpo05; seed=1
                                gmin=${GRPO1_MIN:-$gmin}; }
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_grpo_gsm8k.yaml --run $RUNS/$name \
        --minutes $gmin --deadline 1700 --bench $A/gsm8k_heldout.jsonl --scoring math --set seed=$seed \
        --set model.name_or_path=$Q05 --set data.path=$A/gsm8k_train.jsonl ;;
    tta0|tta1|tta2|ttav)
      local seed=${job#tta} extra="" tmin=${TTA_MIN:-10}
      [ $job = tta2 ] && { echo "== tta2: waiting for tta1 (same GPU)"; waitfor tta1; tmin=${TTA2_MIN:-5}; }
      if [ $job = ttav ]; then
        seed=0 tmin=${TTAV_MIN:-6} extra="--set rollout.backend=vllm"; export VLLM_USE_FLASHINFER_SAMPLER=0
        echo "== ttav: waiting for tta0 (same GPU) and for vLLM"; waitfor tta0
        while [ ! -d /tmp/site/vllm ] || ! grep -q VLLM_STAGED /tmp/vllm_stage.log 2>/dev/null; do sleep 5; done
      fi
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_grpo_gsm8k.yaml --run $RUNS/$name \
        --minutes $tmin --deadline 1700 --set seed=$seed --set model.name_or_path=$Q05 \
        --set data.path=$A/gsm8k_train.jsonl --set checkpoint.every=0 --set checkpoint.every_minutes=1 \
        --set checkpoint.keep_last=2 $extra
      touch $RUNS/$name.done ;;
    ttatrl)
      python3 benchmarks/gpu/trl_gsm8k.py train --run $RUNS/$name --model $Q05 --minutes ${TTA_MIN:-10} \
        --save-every 60 --data $A/gsm8k_train.jsonl --deadline 1500
      touch $RUNS/$name.done ;;
    ttaeval)
      local r runs="" until=""
      for r in ${TTA_RUNS:-tta0 tta1 tta2 ttatrl ttav}; do runs="$runs --run $RUNS/$r"; until="$until --until $RUNS/$r.done"; done
      python3 benchmarks/gpu/learn_run.py watch $runs $until --keep /tmp/keep --bench $A/gsm8k_heldout.jsonl \
        --scoring math --deadline 1700 ;;
    trl05)
      python3 benchmarks/gpu/trl_gsm8k.py train --run $RUNS/$name --model $Q05 --minutes ${TRL_MIN:-13.4} \
        --save-every 120 --data $A/gsm8k_train.jsonl --bench $A/gsm8k_heldout.jsonl --deadline 1500 ;;
    sspq)
      python3 benchmarks/gpu/ssp_eval.py make-questions --model base:$Q15 --config benchmarks/gpu/learn_ssp.yaml \
        --n 200 --batch 256 --minutes ${SSPQ_MIN:-5} --out $A/ssp_heldout.jsonl ;;
    vllmb)
      echo "== vllmb: waiting for trl05 / ttatrl (same GPU) and for vLLM"; waitfor trl05; waitfor ttatrl
      while [ ! -d /tmp/site/vllm ] || ! grep -q VLLM_STAGED /tmp/vllm_stage.log 2>/dev/null; do sleep 5; done
      vllm_benches ;;
    mathof-*)  # mathof-RUN: keep RUN's checkpoints (hard links) while it trains, then score them all on GSM8K
               # held-out with math scoring into RUN-math (a GRPO run started without --scoring math is scored
               # `exact`, while TRL's and earlier runs' are `math`)
      local r=${name#mathof-} keep=$RUNS/${name#mathof-}-math
      mkdir -p $keep/checkpoints
      while [ ! -f $LOGS/$r.pid ] || kill -0 "$(cat $LOGS/$r.pid)" 2>/dev/null; do
        for c in $RUNS/$r/checkpoints/step-*; do
          [ -f $c/meta.json ] && [ ! -d $keep/checkpoints/$(basename $c) ] && cp -al $c $keep/checkpoints/
        done; sleep 3
      done
      cp $RUNS/$r/config.yaml $RUNS/$r/metrics.jsonl $keep/
      python3 benchmarks/gpu/learn_run.py eval --run $keep --bench $A/gsm8k_heldout.jsonl --scoring math ;;
    gs|gsc|gm|gmc|gr|grc)  # SPICE through the task gate (shipped defaults: consensus reader, guess probe, template
                    # penalty, chance correction, -1/-0.5 penalties, thinking Challenger, 128-trajectory mini-batches),
                    # Qwen2.5-Coder-1.5B, one run per GPU; gsc / gmc: the same config with --control random-reward;
                    # gr / grc: gs / gsc with the gate's recall rule on (gate.recall: numeric questions that give no
                    # number refused, and the Challenger told so)
      local corpus=$A/wiki.jsonl ctl="" extra=""
      case $job in gm|gmc) corpus=$A/gsm8k_docs.jsonl ;; esac
      case $job in gsc|gmc|grc) ctl="--set train.control=random-reward" ;; esac
      case $job in gr|grc) extra="--set gate.recall=true" ;; esac
      for s in ${XSET:-}; do extra="$extra --set $s"; done  # XSET="k=v ...": a variant of the job, run and control alike
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_spice_qwen.yaml --run $RUNS/$name --minutes $min \
        --deadline 1500 --set train.micro_batch_tokens=${MBT:-4096} --set train.prompts_per_step=16 $SMALL \
        --set spice.task_max_new_tokens=768 --set gate.consensus_max_new_tokens=384 --set checkpoint.every=0 \
        --set model.name_or_path=$Q15 --set corpus.path=$corpus ${SEED:+--set seed=$SEED} \
        ${STEPS:+--set train.steps=$STEPS} $ctl $extra
      echo "== $name trained; evaluating"
      case $job in
        gs|gsc|gr|grc) TASKS=64 spice_eval $RUNS/$name $Q15 ;;
        gm|gmc) spice_eval $RUNS/$name $Q15 $A/gsm8k_docs_heldout.jsonl $A/gsm8k_heldout.jsonl gsm8k_heldout 0 64 ;;
      esac
      touch $RUNS/$name.done ;;
    sg|sgc)  # SSP with the task gate's defaults (copy ratio against the search results, template
             # penalty) and the Proposer's prompt showing a whole reply, Qwen2.5-Coder-1.5B over Wikipedia; sgc: the
             # same config with --control random-reward (the Solver's reward a coin; the Proposer's from the coins)
      local ctl=""
      [ $job = sgc ] && ctl="--set train.control=random-reward"
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_ssp.yaml --run $RUNS/$name --minutes $min \
        --deadline 1500 --set train.micro_batch_tokens=${MBT:-4096} --set model.name_or_path=$Q15 \
        --set corpus.path=$A/wiki.jsonl --set checkpoint.every=0 $ctl
      echo "== $name trained; held-out cloze with search"; ssp_cloze $name
      touch $RUNS/$name.done ;;
    sc|scc|so|soc|pp|ppc)  # (header) method + its random-reward control, then method_eval.py
      local m ctl="" E="python3 benchmarks/gpu/method_eval.py" H=$A/wiki_heldout.jsonl
      case $job in sc*) m=scope ;; so*) m=score ;; pp*) m=piplay ;; esac
      case $job in scc|soc|ppc) ctl="--set train.control=random-reward" ;; esac
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_$m.yaml --run $RUNS/$name --minutes $min \
        --deadline 1500 --set model.name_or_path=$Q15 --set corpus.path=$A/wiki.jsonl --set checkpoint.every=0 $ctl
      echo "== $name trained; held-out evaluation (base, last checkpoint)"
      local S="--search $A/wiki.jsonl --search $H"
      case $m in
        scope) $E make-scope --docs $H --n 200 --out $A/me_scope_open.jsonl
               $E eval --run $RUNS/$name --bench $A/me_scope_open.jsonl --name scope-open $S
               $E make-cloze --docs $H --n 300 --out $A/me_cloze.jsonl
               $E eval --run $RUNS/$name --bench $A/me_cloze.jsonl --name scope-cloze $S ;;
        score) $E make-score --docs $H --n 200 --out $A/me_score_reports.jsonl
               $E eval --run $RUNS/$name --bench $A/me_score_reports.jsonl --name score-reports $S ;;
        piplay) $E make-multihop --docs $H --n 200 --out $A/me_piplay_multihop.jsonl
                $E eval --run $RUNS/$name --bench $A/me_piplay_multihop.jsonl --name piplay-multihop $S ;;
      esac
      touch $RUNS/$name.done ;;
    sorg)  # SCORE's recorded held-out reports (examples/runs/score-wiki-qwen15-reserve and its control, from the
           # working tree of the `start sorg` call: examples/runs back in place) graded again by the frozen base
           # with the fixed score parser, all 200 items, no generation (method_eval.py regrade, as
           # score-reports-regraded-all); then `paired_runs.py` pairs them. ~1 minute of an H200 after the import.
      python3 benchmarks/gpu/method_eval.py make-score --docs $A/wiki_heldout.jsonl --n 200 --out $A/me_score_reports.jsonl
      for r in score-wiki-qwen15-reserve score-wiki-qwen15-reserve-control; do
        rm -rf $RUNS/$r && cp -r ${A%/.gpu_assets}/examples/runs/$r $RUNS/$r
        python3 benchmarks/gpu/method_eval.py regrade --run $RUNS/$r --bench $A/me_score_reports.jsonl \
          --name score-reports --as score-reports-regraded-all --judge $Q15
      done
      touch $RUNS/sorg.done ;;
    ov0|ov1)  # held-out parity of train.overlap: GRPO on Qwen2.5-Coder-0.5B over GSM8K items 0-659, overlap off (ov0)
              # or one_step (ov1), the same seed ($SEED, default 0), $OV_MIN minutes of training each, one card each;
              # the base and the last checkpoint evaluated on items 660-1318 (paired_runs.py ov1 --control ov0
              # gives one_step - off, paired)
      local o=off
      [ $job = ov1 ] && o=one_step
      python3 benchmarks/gpu/learn_run.py train benchmarks/gpu/learn_grpo_gsm8k.yaml --run $RUNS/$name \
        --minutes ${OV_MIN:-4} --deadline 900 --bench $A/gsm8k_heldout.jsonl --scoring math --set seed=${SEED:-0} \
        --set model.name_or_path=$Q05 --set data.path=$A/gsm8k_train.jsonl --set checkpoint.every=0 \
        --set train.overlap=$o
      touch $RUNS/$name.done ;;
    ovl)  # GRPO step with train.overlap off vs one_step on the 321M shape (bench_overlap.py), each
          # setting twice at 8 prompts and once at 32, alternating; needs only `first` (wheels + SmolLM2 tokenizer),
          # so it runs on a card that is idle while the model parts are staged. RESULT lines: $LOGS/ovl/results.jsonl
      local o p
      for p in 8 32 8; do for o in off one_step; do
        python3 benchmarks/gpu/bench_overlap.py --overlap $o --prompts $p --steps 6 || echo "bench_overlap $o $p failed"
      done; done ;;
    consn)  # the consensus readers' n (benchmarks/gpu/consensus_n.py): the tasks that a SPICE run's Challenger wrote and
            # the gate's reader was asked about ($CONS_RUN, default gs; its documents from $CONS_DOCS, default
            # wiki.jsonl) read 15 times each by the base 1.5B, then n = 1, 3, ..., 13 readers against all 15
      local src=${CONS_RUN:-gs}
      echo "== consn: waiting for $src"; waitfor $src
      python3 benchmarks/gpu/consensus_n.py tasks --run $RUNS/$src --docs ${CONS_DOCS:-$A/wiki.jsonl} --out $A/consn_tasks.jsonl
      python3 -m trainer gate $A/consn_tasks.jsonl --model $Q15 --answers 1 --max-new-tokens 512 \
        --set gate.consensus_samples=15 --set gate.guess_probe=false --set gate.consensus_max_new_tokens=384 \
        > $LOGS/consn/verdicts.jsonl
      python3 benchmarks/gpu/consensus_n.py table $LOGS/consn/verdicts.jsonl --k 15 ;;
    speval15) spice_eval $RUNS/spice15 $Q15 ;;
    speval05) spice_eval $RUNS/spice05 $Q05 ;;
    sspeval15) ssp_cloze ssp15; python3 benchmarks/gpu/ssp_eval.py eval --run $RUNS/ssp15 --bench $A/ssp_heldout.jsonl --judged ;;
    *) echo "unknown job $job"; return 1 ;;
  esac
}

job() {  # job NAME[:SEED][@GPU]: start NAME's chain detached on its GPU (@GPU for this job, else GPU=N for all);
        # :SEED runs it with seed SEED under the name NAME-sSEED (two seeds of one job in one session: gm:2 gm:3;
        # the SPICE jobs and ov0/ov1 only, the ones that take SEED); `stop` and `waitfor` take the name NAME-sSEED
  local spec=$1 name gpu seed="" jgpu=""
  [[ $spec =~ @([0-9]+) ]] && jgpu=${BASH_REMATCH[1]}
  [[ $spec =~ :([0-9]+) ]] && seed=${BASH_REMATCH[1]}
  name=${spec%%[:@]*}
  if [ -n "$seed" ]; then
    case $name in gs|gsc|gm|gmc|gr|grc|ov0|ov1) ;;
      *) echo "job $spec: $name does not take a seed (the SPICE jobs gs..grc and ov0/ov1 do)"; return 1 ;; esac
  fi
  case $name in
    spice15|speval15|tta0|ttav|gs|so|ov0|sorg) gpu=0 ;; grpo05|grpo05s1|spice05|speval05|mathof-*|tta1|tta2|gsc|soc|ovl|ov1) gpu=1 ;;
    trl05|vllmb|ttatrl|gm|sg|sc|pp|gr) gpu=2 ;; ssp15|sspeval15|sspq|spicem15|ttaeval|gmc|sgc|scc|ppc|consn|grc) gpu=3 ;;
    *) echo "unknown job $name"; return 1 ;;
  esac
  gpu=$((gpu % $(nvidia-smi -L | wc -l)))  # a 2-GPU machine: 2 -> 0, 3 -> 1 (gm and sg share card 0, their controls 1)
  gpu=${jgpu:-${GPU:-$gpu}}
  local base=$name
  [ -n "$seed" ] && name=$name-s$seed
  mkdir -p $LOGS/$name
  case $base in spice15|spice05|spicem15|ssp15|trl05|grpo05|grpo05s1|tta0|tta1|tta2|ttav|ttatrl|gs|gsc|gm|gmc|gr|grc|sg|sgc|sc|scc|so|soc|pp|ppc|ov0|ov1)
    rm -rf $RUNS/$name $RUNS/$name.done ;; esac
  local pre=""  # started by `join`: wait for the import first
  # the code a job runs: /tmp/code, a snapshot of the committed tree (copied as .gpu_code, made on the dev machine by
  # `git archive HEAD trainer benchmarks/gpu ... | tar -x -C .gpu_code`), so that a later command's copy of a working
  # tree with uncommitted edits never changes the modules of a running job
  if [ -d .gpu_code/trainer ] && [ ! -d /tmp/code/trainer ]; then cp -r .gpu_code /tmp/code; fi
  [ -n "$WAIT" ] && pre="waitfor $WAIT; [ -f $MODELS/${WAIT#join-}/config.json ] || { echo 'import failed'; exit 1; }"
  # (the assets' relative defaults, .gpu_assets/..., resolve there through a link: without it a script's default
  # such as `make-cloze --docs .gpu_assets/wiki_heldout.jsonl` finds nothing when run from /tmp/code)
  [ -d /tmp/code/trainer ] && { ln -sfn $PWD/.gpu_assets /tmp/code/.gpu_assets
                                pre="cd /tmp/code; export PYTHONPATH=/tmp/site:/tmp/code; $pre"; }
  detach $name $gpu bash -c "$(declare -f waitfor spice_eval ssp_cloze vllm_benches chain)
    $pre
    ${seed:+export SEED=$seed RUN_NAME=$name;} chain $base"
}

status() {
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
  df -h /tmp | tail -1  # a 1.5B checkpoint with its optimizer state is ~18 GB: four of them fill the disk
  # a chain left out of every join/start is otherwise silent (CHAINS: the jobs expected to start)
  local never=""
  for j in ${CHAINS:-tta0 tta1 tta2 ttatrl ttaeval ttav vllmb}; do [ -f $LOGS/$j.pid ] || never="$never $j"; done
  echo "== never started:${never:- none}"
  for pidf in $LOGS/*.pid; do
    [ -f "$pidf" ] || continue
    local n; n=$(basename "$pidf" .pid)
    if kill -0 "$(cat "$pidf")" 2>/dev/null; then echo "== $n running"; else echo "== $n ended"; fi
    grep -hE "^RESULT|Error|error" $LOGS/$n.log 2>/dev/null | tail -4 | cut -c1-400
    tail -n 2 $LOGS/$n/train_*.log 2>/dev/null | cut -c1-300
  done
  for r in $RUNS/*/; do
    [ -f "$r/metrics.jsonl" ] || continue
    python3 - "$r" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
steps = sorted({r["step"] for r in rows})
last = {}
for r in rows:
    if r["step"] == steps[-1]:
        last.update({f"{r['role'][:4]}/{k}": round(v, 3) for k, v in r.items()
                     if k in ("valid_rate", "accuracy", "pass_rate_mean", "reward_mean", "step_seconds", "rollout_seconds",
                              "update_seconds", "other_seconds", "overhead_ratio", "graph_captures",
                              "graph_capture_seconds", "rollout_calls", "truncated_rate", "documents_dropped",
                              "answer_share_max", "template_cluster_max", "guess_pass_rate", "consensus_rate",
                              "optimizer_steps", "gate_guessable_rate", "gate_consensus_rate", "gate_copy_ratio_rate")})
evals = [json.loads(l) for l in (run / "evals.jsonl").read_text().splitlines()] if (run / "evals.jsonl").exists() else []
print(run.name, "steps", len(steps), json.dumps(last))
for e in evals:
    print("  eval", e["benchmark"], "step", e["step"], e["score"], [e["ci_low"], e["ci_high"]])
PY
  done
}

pack() {  # run folders without weights (samples cut to ~${SAMPLES_MB:-8} MB each) + logs, one archive ($OUT: <= 8 files)
  rm -rf /tmp/pack && mkdir -p /tmp/pack/runs
  for r in $RUNS/*/; do
    local n; n=$(basename "$r"); mkdir -p /tmp/pack/runs/$n
    find "$r" -maxdepth 1 -type f ! -name samples.jsonl -exec cp {} /tmp/pack/runs/$n/ \;
    [ -d "$r/eval_samples" ] && cp -r "$r/eval_samples" /tmp/pack/runs/$n/
    [ -f "$r/samples.jsonl" ] && head -c $((${SAMPLES_MB:-8} * 1000000)) "$r/samples.jsonl" | sed '$d' > /tmp/pack/runs/$n/samples.jsonl
  done
  cp -r $LOGS /tmp/pack/logs
  tar -czf $OUT/runs.tgz -C /tmp/pack runs logs
  ls -la $OUT | tail -n +2 | awk '{print $5, $9}'
}

case $phase in
  first)
    [ -d .gpu_assets/first ] && cp -r .gpu_assets/first/. .gpu_assets/
    ls .gpu_assets
    tail -2 /tmp/setup.log
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
    python3 benchmarks/gpu/stage_gguf.py collect ;;
  join)  # join MODEL [JOB...]: check + import MODEL, and start the JOBs, all detached (the command returns at once);
         # each job waits for the import (its chain starts with waitfor join-MODEL)
    m=$2; shift 2
    detach join-$m 0 python3 benchmarks/gpu/stage_gguf.py join $m --dest $MODELS/$m
    for j in "$@"; do WAIT=join-$m job $j; done ;;
  start) shift; for j in "$@"; do job $j; done ;;
  stop)  # stop jobs (their runs end at the next step boundary with a checkpoint: SIGINT is not that, so the
         # time limit is what ends a run; this is for a job gone wrong)
    shift; for j in "$@"; do pkill -TERM -s "$(ps -o sid= -p "$(cat $LOGS/$j.pid)" | tr -d ' ')" 2>/dev/null; echo "stopped $j"; done ;;
  watch)  # waits SECS, or less once every started job has ended
    end=$((SECONDS + ${2:-60}))
    while [ $SECONDS -lt $end ]; do
      sleep 10; alive=0
      for pidf in $LOGS/*.pid; do [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && { echo "== every job has ended"; break; }
    done
    status; pack ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
