"""Time to accuracy (issue 22 item 3): TRL 1.16 GRPOTrainer on the GSM8K learning run of issue 21, for a
wall-clock budget, its checkpoints evaluated at fixed training times like ours, and the comparison table.
Run from the repository root after ``source benchmarks/gpu/setup.sh``:

    python3 benchmarks/gpu/trl_gsm8k.py train --run /tmp/runs/trl --model /tmp/models/qwen2.5-coder-0.5b-instruct \
        --minutes 10 --save-every 120 --bench .gpu_assets/gsm8k_heldout.jsonl
    python3 benchmarks/gpu/trl_gsm8k.py eval --run /tmp/runs/trl --bench .gpu_assets/gsm8k_heldout.jsonl
    python3 benchmarks/gpu/trl_gsm8k.py pack --run /tmp/runs/trl       # run folder (no weights) -> $OUT
    python3 benchmarks/gpu/trl_gsm8k.py compare --trl examples/runs/trl-grpo-gsm8k-qwen05   # here, no GPU

The CPU check (a random-init 2-layer Qwen2 with the real tokenizer; 2 steps of 2 prompts x 2, 32 tokens, a
checkpoint after each step, 4 held-out items; about 3 minutes on 2 cores):

    python benchmarks/gpu/trl_gsm8k.py tiny --tokenizer var/models/qwen2.5-coder-0.5b-instruct --out /tmp/tiny
    head -4 .gpu_assets/gsm8k_heldout.jsonl > /tmp/gsm8k_heldout.jsonl
    python benchmarks/gpu/trl_gsm8k.py train --run /tmp/trl-smoke --model /tmp/tiny --minutes 5 --save-every 1 \
        --prompts 2 --group 2 --micro-batch 2 --max-new-tokens 32 --max-steps 2 --bench /tmp/gsm8k_heldout.jsonl \
        --eval-tokens 32

``train`` writes RUN/config.yaml (our config's terms for the matched settings; TRL's own arguments in
RUN/trl_args.json), starts TRL's training in a child process, and meanwhile evaluates the base model (t = 0)
and each new checkpoint on ``--bench`` with learn_run.py's evaluator (trainer.evaluate: greedy, 512 tokens,
math scoring, 95% bootstrap interval), on the same GPU, as ours was. A callback saves a checkpoint
(RUN/checkpoints/step-NNNNNN/model/ = a Hugging Face folder, + meta.json) at the first step end after every
``--save-every`` seconds of training and at the end of the budget, and writes RUN/metrics.jsonl: per step
``step_seconds`` (wall time of the step, the saves excluded) and TRL's logged signals under our names
(reward_mean, response_length, truncated_rate, ...). evals.jsonl's ``train_seconds`` is the sum of
``step_seconds`` up to the checkpoint's step: TRL's training wall-clock at the save, as for ours. The folder
loads into the web with ``manage.py import_run`` (method grpo; the folder name says it is TRL).

Matched to benchmarks/gpu/learn_grpo_gsm8k.yaml (ours, issue 21): the same JSONL (GSM8K items 0-659), the same
prompt tokens (the chat template on one user turn, no system message; checked against ours at start), the same
reward (``trainer.verify.score_answer(text, gold, "math")``: boxed answer, else the last number, vs gold), 32
prompts x 8 completions = 256 per optimizer step (16 per micro-batch x 16 accumulation steps; TRL generates the
256 in one ``generate`` call), 512 new tokens, temperature 1.0, top_p 1, no top_k, no repetition penalty, lr
1e-6 with our warmup (LambdaLR, factor (s+1)/(5+1) for optimizer step s < 5, then 1: trainer/engine), fused
AdamW (0.9, 0.999, 1e-8, no weight decay; TRL's default optimizer is the one ours uses), grad clip 1.0, no KL
(beta 0), PPO clip 0.2, float32 master weights with bf16 autocast, no gradient checkpointing, seed 0.

Where TRL differs from ours (its own behaviour, kept: this measures TRL as a user gets it):
- loss_type "dapo" (TRL's default): token losses summed over the whole 256-completion batch / its token count,
  the closest to our ``train.loss_agg: token_mean``;
- advantages (r - group mean) / (group std + 1e-4) (``scale_rewards: group``), ours the same with its eps;
- the PPO ratio's "old" log-probs are the trainer's own (detached, ratio 1 on the single pass) where ours takes
  the rollout's; the rollout is ``transformers`` generate (no vLLM: that anchor is issue 22 item 2) where ours
  ran its CUDA-graph decode;
- prompt order: TRL's RepeatSampler shuffle (seed 0) instead of our per-epoch seeded permutation.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

OURS = ROOT / "examples" / "runs" / "grpo-gsm8k-qwen05-lr1e-6"
OUR_CONFIG = ROOT / "benchmarks" / "gpu" / "learn_grpo_gsm8k.yaml"
ROLE = "solver"
# TRL's logged names -> ours (trainer/methods/grpo.py, trainer/update.py); other numeric ones keep TRL's name
TRL_NAMES = {"reward": "reward_mean", "reward_std": "reward_std", "completions/mean_length": "response_length",
             "completions/clipped_ratio": "truncated_rate", "frac_reward_zero_std": "zero_variance_groups",
             "learning_rate": "lr", "grad_norm": "grad_norm", "loss": "loss", "entropy": "entropy",
             "step_time": "trl_step_time"}


class UsageError(Exception):
    """Bad input: printed as one line, exit 2."""


# ---- settings ---------------------------------------------------------------------------------------

def our_config(args):
    """Our run config for the matched settings (written as RUN/config.yaml; import_run reads it)."""
    from trainer.config import ConfigError, load_config

    sets = [f"model.name_or_path={args.model}", f"data.path={args.data}", f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"train.prompts_per_step={args.prompts}",
            f"train.lr={args.lr}", f"train.warmup_steps={args.warmup}", f"train.device={args.device}",
            f"train.micro_batch_size={args.micro_batch}", f"seed={args.seed}", "train.packing=false"]
    try:
        return load_config(OUR_CONFIG, sets)
    except ConfigError as exc:
        raise UsageError(f"the matched config is not valid: {exc}") from None


def trl_args(args, run: Path) -> dict:
    """GRPOConfig keyword arguments (RUN/trl_args.json)."""
    per_step = args.prompts * args.group
    if per_step % args.micro_batch:
        raise UsageError(f"--micro-batch {args.micro_batch} must divide prompts x group = {per_step}")
    cuda = args.device == "cuda"
    return dict(
        output_dir=str(run / "trl_output"), per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=per_step // args.micro_batch, num_generations=args.group,
        max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
        repetition_penalty=1.0, learning_rate=args.lr, warmup_steps=args.warmup, beta=0.0, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", num_iterations=1, max_grad_norm=1.0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, bf16=cuda, use_cpu=not cuda,
        model_init_kwargs={"dtype": "float32"}, gradient_checkpointing=False, mask_truncated_completions=False,
        max_steps=args.max_steps, logging_steps=1, save_strategy="no", report_to="none", seed=args.seed,
        use_vllm=False, shuffle_dataset=True, disable_tqdm=True, log_completions=False, dataloader_num_workers=0,
    )


def check_inputs(args) -> None:
    model = Path(args.model)
    if not (model / "config.json").is_file():
        raise UsageError(f"--model {args.model}: no config.json there (give a Hugging Face model folder, e.g. "
                         "/tmp/models/qwen2.5-coder-0.5b-instruct)")
    if not Path(args.data).is_file():
        raise UsageError(f"--data {args.data} does not exist (python benchmarks/gpu/gsm8k_split.py writes it)")
    for bench in getattr(args, "bench", []) or []:
        if not Path(bench).is_file():
            raise UsageError(f"--bench {bench} does not exist (python benchmarks/gpu/gsm8k_split.py writes it)")
    if args.minutes <= 0 or args.save_every <= 0:
        raise UsageError("--minutes and --save-every must be > 0")


def read_prompts(path: str) -> list[dict]:
    from trainer.jsonl import json_objects

    rows = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for number, row in json_objects(lines, path, UsageError, 'each line: {"prompt": ..., "answer": ...}'):
        if not isinstance(row.get("prompt"), str) or "answer" not in row:
            raise UsageError(f"{path} line {number}: needs a text \"prompt\" and an \"answer\"")
        rows.append({"prompt": [{"role": "user", "content": row["prompt"]}], "answer": str(row["answer"])})
    if not rows:
        raise UsageError(f"{path} holds no prompt")
    return rows


# ---- the TRL process --------------------------------------------------------------------------------

def gsm8k_math(completions, answer, **kwargs) -> list[float]:
    """Our GRPO reward (trainer.verify.score_answer with the math verifier) as a TRL reward function."""
    from trainer.verify import score_answer

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [score_answer(t, gold, "math") for t, gold in zip(texts, answer)]


def append_jsonl(path: Path, row: dict) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def make_clock(run: Path, tokenizer, budget_s: float, save_every: float, max_steps: int):
    """The TrainerCallback that times steps, saves checkpoints at fixed training times and stops at the budget."""
    import torch
    from transformers import TrainerCallback

    from trainer.context import timed_checkpoint_due

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class Clock(TrainerCallback):
        trainer = None  # set after the trainer is built

        def __init__(self):
            self.train_s, self.mark, self.saved = 0.0, None, set()

        def on_train_begin(self, args, state, control, **kw):
            sync()
            self.mark = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            sync()
            now = time.perf_counter()
            step_s, self.mark = now - self.mark, now
            self.train_s += step_s
            append_jsonl(run / "metrics.jsonl", {"step": state.global_step, "role": ROLE, "step_seconds": round(step_s, 3),
                                                 "train_seconds": round(self.train_s, 2)})
            last = self.train_s >= budget_s or state.global_step >= max_steps
            if timed_checkpoint_due(self.train_s - step_s, step_s, save_every) or last:  # ours' grid exactly
                self.save(state.global_step)
            if last:
                control.should_training_stop = True
            self.mark = time.perf_counter()  # the save is not training time

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "reward" not in logs:  # the end-of-train summary has no reward
                return
            row = {"step": state.global_step, "role": ROLE}
            for key, value in logs.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                    row[TRL_NAMES.get(key, "trl_" + key.replace("/", "_").replace(" ", "_"))[:100]] = value
            append_jsonl(run / "metrics.jsonl", row)

        def save(self, step: int) -> None:
            if step in self.saved:
                return
            t0 = time.perf_counter()
            final = run / "checkpoints" / f"step-{step:06d}"
            tmp = run / "checkpoints" / f".tmp-step-{step:06d}"
            shutil.rmtree(tmp, ignore_errors=True)
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            model.save_pretrained(tmp / "model", safe_serialization=True)
            tokenizer.save_pretrained(tmp / "model")
            (tmp / "meta.json").write_text(json.dumps({  # written last: learn_run's evaluator waits for it
                "step": step, "method": "grpo", "trainer": "trl-1.16 GRPOTrainer",
                "train_seconds": round(self.train_s, 2), "model": str(model.config._name_or_path), "lora_r": 0}, indent=1))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            append_jsonl(run / "checkpoints.jsonl", {"step": step, "path": str(final)})
            self.saved.add(step)
            print(f"checkpoint step {step} at {self.train_s:.1f} s of training (save {time.perf_counter() - t0:.1f} s)",
                  flush=True)

    return Clock()


def cmd_trl(args) -> None:
    """The training process (started by ``train``)."""
    try:
        import trl
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        raise UsageError(f"TRL is not importable ({exc}); on the GPU machine `source benchmarks/gpu/setup.sh` "
                         "installs the carried trl 1.16.0 / datasets wheels") from None
    import torch
    from transformers import AutoTokenizer

    from trainer.engine.torch_engine import warmup_constant
    from trainer.prompts import chat

    run = Path(args.run)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows = read_prompts(args.data)
    ours = chat(tokenizer, "", rows[0]["prompt"][0]["content"])
    theirs = tokenizer.apply_chat_template(conversation=[rows[0]["prompt"]], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"][0]
    if list(theirs) != ours:
        raise SystemExit(f"prompt tokens differ from ours: TRL {len(theirs)} vs ours {len(ours)} tokens")
    print(f"trl {trl.__version__}; prompt tokens equal ours ({len(ours)} tokens, first prompt)", flush=True)

    kwargs = trl_args(args, run)
    (run / "trl_args.json").write_text(json.dumps({"trl": trl.__version__, "torch": torch.__version__, **kwargs},
                                                  indent=1, default=str))

    class Trainer(GRPOTrainer):
        def create_scheduler(self, num_training_steps, optimizer=None):  # our warmup (trainer/engine)
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer,
                                                                      warmup_constant(args.warmup))
            return self.lr_scheduler

    clock = make_clock(run, tokenizer, args.minutes * 60, args.save_every, args.max_steps)
    trainer = Trainer(model=args.model, reward_funcs=gsm8k_math, args=GRPOConfig(**kwargs),
                      train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[clock])
    clock.trainer = trainer
    gen = trainer.generation_config
    print(f"generation: do_sample {gen.do_sample} temperature {gen.temperature} top_p {gen.top_p} top_k {gen.top_k} "
          f"max_new_tokens {gen.max_new_tokens}; optimizer {trainer.args.optim}; model dtype "
          f"{next(trainer.model.parameters()).dtype}", flush=True)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    trainer.train()
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    print(json.dumps({"trl_done": True, "steps": trainer.state.global_step, "train_seconds": round(clock.train_s, 1),
                      "wall_s": round(time.time() - t0, 1), "peak_mem_gb": peak}), flush=True)


# ---- train (TRL + concurrent evaluation), eval, pack ---------------------------------------------------

def cmd_train(args) -> None:
    check_inputs(args)
    run = Path(args.run)
    if (run / "metrics.jsonl").exists():
        raise UsageError(f"{run} holds a run already (metrics.jsonl); give a new --run folder")
    run.mkdir(parents=True, exist_ok=True)
    from trainer.config import save_config

    save_config(our_config(args), run / "config.yaml")
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(
        "# TRL 1.16 GRPOTrainer run (benchmarks/gpu/trl_gsm8k.py), not ours: the matched settings in our config's\n"
        "# terms; TRL's own arguments are in trl_args.json.\n" + text)

    from learn_run import evaluator  # the evaluation ours had (base, then each new checkpoint, same GPU)

    cmd = [sys.executable, str(Path(__file__).resolve()), "_trl", *sys.argv[2:]]
    print("train:", " ".join(cmd), flush=True)
    t0 = time.time()
    stop = threading.Event()
    worker = threading.Thread(target=evaluator, args=(run, eval_args(args), stop), daemon=True) if args.bench else None
    with (run / "trl_train.log").open("a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        if worker is not None:
            worker.start()
        rc = proc.wait()
    stop.set()
    if worker is not None:
        worker.join(timeout=max(10, args.deadline - (time.time() - t0)))
    tail = (run / "trl_train.log").read_text(errors="replace").splitlines()[-15:]
    print("\n".join(tail))
    steps = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()] \
        if (run / "metrics.jsonl").is_file() else []
    print(json.dumps({"train": {"rc": rc, "seconds": round(time.time() - t0, 1),
                                "last_step": max((r["step"] for r in steps), default=0),
                                "checkpoints": sorted(p.name for p in (run / "checkpoints").glob("step-*"))
                                if (run / "checkpoints").is_dir() else []}}), flush=True)
    from learn_run import curve

    curve(steps)
    if rc != 0:
        sys.exit(rc)


def eval_args(args) -> SimpleNamespace:
    """What learn_run's evaluator reads."""
    return SimpleNamespace(bench=args.bench, base=args.base, max_new_tokens=args.eval_tokens, scoring=args.scoring)


def cmd_eval(args) -> None:
    from learn_run import evaluator

    for bench in args.bench:
        if not Path(bench).is_file():
            raise UsageError(f"--bench {bench} does not exist (python benchmarks/gpu/gsm8k_split.py writes it)")
    if not Path(args.run).is_dir():
        raise UsageError(f"--run {args.run} is not a folder")
    stop = threading.Event()
    stop.set()
    evaluator(Path(args.run), eval_args(args), stop)


def cmd_pack(args) -> None:
    from learn_run import OUT, cmd_pack as pack

    pack(args)
    run = Path(args.run)
    for name in ("trl_args.json", "trl_train.log"):
        if (run / name).is_file():
            shutil.copy(run / name, OUT / run.name / name)


def cmd_tiny(args) -> None:
    """A random-init 2-layer Qwen2 with a real tokenizer (the CPU smoke's model)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Qwen2ForCausalLM(cfg).save_pretrained(args.out)
    tok.save_pretrained(args.out)
    print(f"tiny qwen2 -> {args.out}")


# ---- compare ----------------------------------------------------------------------------------------

def curve_of(run: Path, benchmark: str) -> list[dict]:
    """(train_seconds, score, ci) of a run's evaluations on ``benchmark``, by training time."""
    from trainer.runfolder import RunFolderError, read_evals

    try:
        rows = [r for r in read_evals(run) if r["benchmark"] == benchmark]
    except RunFolderError as exc:
        raise UsageError(f"{run}: {exc}") from None
    missing = [r["step"] for r in rows if not isinstance(r.get("train_seconds"), (int, float))]
    if missing:
        raise UsageError(f"{run}/evals.jsonl: steps {missing} have no train_seconds")
    return sorted(rows, key=lambda r: (r["train_seconds"], r["step"]))


def at(curve: list[dict], t: float) -> dict | None:
    """The latest evaluation at or before training time t."""
    done = [r for r in curve if r["train_seconds"] <= t + 1e-9]
    return done[-1] if done else None


def time_to(curve: list[dict], score: float) -> tuple[float | None, float | None]:
    """(training seconds of the first evaluation scoring >= score, the same linearly interpolated from the
    evaluation before it); (None, None) when none does (``trainer.evaluate.time_to_reach``, as the compare view)."""
    from trainer.evaluate import time_to_reach

    return time_to_reach([(r["train_seconds"], r["score"]) for r in curve], score)


def compare(ours: list[dict], trl: list[dict], every: float = 0.0) -> dict:
    """The table (rows: every checkpoint time of either run, or multiples of ``every`` seconds) and the issue's
    ratio: ours' time to TRL's final accuracy / TRL's time."""
    if not ours or not trl:
        raise UsageError("both runs need evaluations on the benchmark (ours: %d, TRL: %d)" % (len(ours), len(trl)))
    final = trl[-1]
    end = max(ours[-1]["train_seconds"], final["train_seconds"])
    if every > 0:  # fixed times (a checkpoint saved a step after a mark shows from the next row on)
        times = [i * every for i in range(int(end // every) + 1)]
        times += [end] if times[-1] < end else []
    else:  # every checkpoint time of either run: the two step functions exactly
        times = sorted({r["train_seconds"] for r in ours + trl})
    table = [{"t": t, "ours": at(ours, t), "trl": at(trl, t)} for t in times]
    reach, reach_interp = time_to(ours, final["score"])
    return {"table": table, "trl_final": final, "trl_base": next((r for r in trl if r["step"] == 0), None),
            "ours_reach_s": reach, "ours_reach_interp_s": reach_interp,
            "ratio": None if reach is None else reach / max(final["train_seconds"], 1e-9),
            "ratio_interp": None if reach is None else reach_interp / max(final["train_seconds"], 1e-9),
            "ours_at_trl_end": at(ours, final["train_seconds"])}


def cmd_compare(args) -> None:
    result = compare(curve_of(Path(args.ours), args.benchmark), curve_of(Path(args.trl), args.benchmark), args.every)

    def cell(r):
        return "-" if r is None else (f"{100 * r['score']:.1f}% [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}] "
                                      f"(step {r['step']}, {r['train_seconds']:.0f} s)")

    print(f"held-out accuracy ({args.benchmark}) vs training wall-clock (seconds of training steps, evaluation and "
          "saves excluded); each cell: the run's latest checkpoint at or before that time")
    print("| train seconds | ours | TRL GRPOTrainer |\n|---|---|---|")
    for row in result["table"]:
        print(f"| {row['t']:.0f} | {cell(row['ours'])} | {cell(row['trl'])} |")
    final, base = result["trl_final"], result["trl_base"]
    print(f"TRL final: {100 * final['score']:.1f}% at {final['train_seconds']:.0f} s (step {final['step']}); "
          f"ours at that time: {cell(result['ours_at_trl_end'])}")
    if base is not None and final["score"] <= base["score"]:
        print(f"TRL's final checkpoint is no better than its base ({100 * base['score']:.1f}% at step 0): the time to "
              "reach it says nothing; the ratio below is degenerate")
    if result["ratio"] is None:
        print(f"ours never reached {100 * final['score']:.1f}% in its {result['table'][-1]['t']:.0f} s: ratio n/a "
              "(target <= 1/3 not met)")
    else:
        print(f"ours reached it at {result['ours_reach_s']:.0f} s (first checkpoint at or above; "
              f"{result['ours_reach_interp_s']:.0f} s interpolated between checkpoints): ratio "
              f"{result['ratio']:.3f} ({result['ratio_interp']:.3f} interpolated); target <= 0.333: "
              f"{'met' if result['ratio'] <= 1 / 3 else 'not met'}")
    print("RESULT " + json.dumps({"time_to_accuracy": {
        "trl_final": final["score"], "trl_seconds": final["train_seconds"], "ours_reach_s": result["ours_reach_s"],
        "ours_reach_interp_s": result["ours_reach_interp_s"], "ratio": result["ratio"],
        "ratio_interp": result["ratio_interp"]}}))


# ---- command line -----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    train = sub.add_parser("train", help="TRL training for --minutes, its checkpoints evaluated meanwhile")
    trl = sub.add_parser("_trl", help=argparse.SUPPRESS)
    for p in (train, trl):
        p.add_argument("--run", required=True)
        p.add_argument("--model", required=True, help="a Hugging Face model folder")
        p.add_argument("--minutes", type=float, required=True, help="training wall-clock budget (saves excluded)")
        p.add_argument("--save-every", type=float, default=120.0, help="checkpoint every this many training seconds")
        p.add_argument("--data", default=str(ROOT / ".gpu_assets" / "gsm8k_train.jsonl"))
        p.add_argument("--prompts", type=int, default=32)
        p.add_argument("--group", type=int, default=8)
        p.add_argument("--micro-batch", type=int, default=16, help="completions per forward/backward")
        p.add_argument("--max-new-tokens", type=int, default=512)
        p.add_argument("--lr", type=float, default=1e-6)
        p.add_argument("--warmup", type=int, default=5)
        p.add_argument("--max-steps", type=int, default=100_000)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--device", choices=("cuda", "cpu"), default=None)
        p.add_argument("--deadline", type=float, default=3600, help="seconds after start by which evaluation gives up")
    ev = sub.add_parser("eval", help="evaluate the base and the checkpoints not yet evaluated")
    ev.add_argument("--run", required=True)
    for p in (train, trl, ev):
        p.add_argument("--bench", action="append", default=[])
        p.add_argument("--base", help="the base model when the run folder has no config.yaml")
        p.add_argument("--eval-tokens", type=int, default=512, help="evaluation answer budget (ours: 512)")
        p.add_argument("--scoring", default="math", help="as ours (evals.jsonl of issue 21): math")
    pk = sub.add_parser("pack", help="the run folder without weights -> $OUT")
    pk.add_argument("--run", required=True)
    cmp = sub.add_parser("compare", help="the table ours vs TRL at fixed training times, and the ratio")
    cmp.add_argument("--trl", required=True, help="TRL's run folder (with evals.jsonl)")
    cmp.add_argument("--ours", default=str(OURS))
    cmp.add_argument("--benchmark", default="gsm8k_heldout")
    cmp.add_argument("--every", type=float, default=0.0,
                     help="rows at multiples of this many seconds (default: at every checkpoint time of either run)")
    tiny = sub.add_parser("tiny", help="a tiny random-init Qwen2 (CPU smoke)")
    tiny.add_argument("--tokenizer", required=True)
    tiny.add_argument("--out", required=True)
    args = parser.parse_args()
    if getattr(args, "device", "x") is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        {"train": cmd_train, "_trl": cmd_trl, "eval": cmd_eval, "pack": cmd_pack, "compare": cmd_compare,
         "tiny": cmd_tiny}[args.cmd](args)
    except UsageError as exc:
        print(f"trl_gsm8k: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
