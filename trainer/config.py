"""Typed, validated run configuration.

A config is YAML (or a dict) with the shared keys of specs/contract.md plus one section named
after the method (``trainer/method_configs.py``)::

    method: grpo
    model: {name_or_path: smollm2-135m-instruct, lora: {r: 0}}
    train: {steps: 4, lr: 1.0e-6}
    data: {path: "bundled:gsm8k"}

``load_config(path_or_dict, overrides=["train.lr=2e-6"])`` returns a ``Config`` or raises a
``ConfigError`` whose ``.problems`` lists EVERY problem as ``(key path, message)`` (unknown keys
included, with the closest known key as a hint). Shared keys the user leaves unset take the
method's paper value (``MethodSection.shared_defaults``), then the generic default below.

``method_fields(method)`` describes every field (path, type, default, help, choices, bounds) for
the web's launch form; every field must have a description.
"""
from __future__ import annotations

import copy
import difflib
import math
import reprlib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model, field_validator, model_validator

from trainer.method_configs import SECTIONS, MethodSection, Section
from trainer.paths import file_field

METHOD_NAMES = tuple(SECTIONS)


class ConfigError(ValueError):
    """Every problem of a config at once: ``problems`` is a list of (key path, message)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        lines = "\n".join(f"  {path or '<config>'}: {msg}" for path, msg in self.problems)
        super().__init__(f"invalid config ({len(self.problems)} problem(s)):\n{lines}")


class LoraConfig(Section):
    r: int = Field(0, ge=0, description="LoRA rank; 0 = full fine-tune.")
    alpha: float = Field(32.0, gt=0, description="LoRA scaling alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Module names to adapt, or all-linear (every linear layer but the output head).")
    lr: float | Literal["auto", "train"] = Field(
        "auto", description="The adapters' learning rate. auto = train.lr x sqrt(3) x hidden_size / alpha, so one "
        "Adam step of an adapter moves the policy about as far as a full fine-tune step at train.lr (the papers' "
        "rates are full fine-tune rates); train = train.lr unchanged; a number = that rate. SmolLM2-135M, r 64, "
        "alpha 32, lr 1e-6: one step's gain 0.034 of a full fine-tune's at train, 1.07 at auto (benchmarks/lora_lr.py).")
    rslora: bool = Field(False, description="Scale the adapter by alpha / sqrt(r) instead of alpha / r (rsLoRA; "
                         "measured: 0.27 of a full fine-tune step at the same lr, r 64).")

    @field_validator("lr", mode="before")
    @classmethod
    def _positive_lr(cls, v):
        """One problem naming the choices (not one per member of the union); a number may come as text
        (YAML reads 1e-5 as a string)."""
        if v in ("auto", "train"):
            return v
        number = v
        if isinstance(v, str):
            try:
                number = float(v)
            except ValueError:
                number = None
        if isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number) and number > 0:
            return float(number)
        raise ValueError("must be auto, train, or a number > 0")


class ModelConfig(Section):
    name_or_path: str = Field(
        "smollm2-135m-instruct",
        description="Bundled model name, a folder under $SELFPLAY_DATA_DIR/models/, a local path, or a cached HF id.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weight dtype; auto = float32 on CPU, float32 master weights + bf16 autocast on GPU.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter; r=0 trains every weight.")
    trust_remote_code: bool = Field(False, description="Run model code shipped with the checkpoint (only if you trust it).")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    compile: bool = Field(
        False, description="torch.compile each decoder layer (regional compile) for the update pass' forward/backward; "
                           "first step pays the compile time (~30 s on an H100). Groups are then packed/padded rather "
                           "than run with a shared prompt cache (train.share_prompt_prefix). Update MFU of a 1.39B "
                           "Llama on an H100: 35.6% -> 57.8% (DeepSpeed ZeRO-2, benchmarks/RESULTS.md).")
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field(
        "sdpa", description="Attention kernel passed to transformers.")
    policies: Literal["shared", "separate"] = Field(
        "shared", description="shared = one set of weights plays every role of the method (chosen by the prompt); "
        "separate = each role trains its own LoRA adapter, with its own optimizer state and checkpoint entry, over "
        "one frozen base (needs model.lora.r > 0; the frozen base is still the judge and the KL reference). "
        "Default separate for scope and piplay, whose papers train two models.")


class RolloutConfig(Section):
    backend: Literal["hf", "vllm"] = Field("hf", description="Generation backend: transformers (hf) or vLLM.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(512, ge=1, le=32768, description="Most tokens generated per model turn (at most 32,768).")
    min_new_tokens: int = Field(0, ge=0, description="EOS is forbidden before this many tokens (benchmarks force full length).")
    answer_reserve_tokens: int | None = Field(
        None, ge=0, description="Multi-turn search rollouts (ssp, scope, score, piplay): tokens of a trajectory kept for "
        "its final answer, question, task or report. Search results are cut so that they remain, and a search with "
        "no room left is refused with a note asking for the answer (ours; None = a quarter of the trajectory's "
        "budget, 0 = off). Without it a 1.5B's 512-token SCORE reports were cut before their answer 59-96% of the "
        "time.")
    group_size: int = Field(8, ge=1, le=512, description="Samples per prompt (the GRPO group G; papers use 4-16, at most 512).")
    max_batch_size: int = Field(256, ge=1, le=65536, description="Most sequences generated in one batch (memory cap).")
    cuda_graphs: Literal["auto", True, False] = Field(
        "auto", description="hf backend: replay each decode step as a CUDA graph over a static KV cache "
                            "(auto = on when the model is on a GPU and its architecture is supported).")
    gpu_memory_utilization: float = Field(0.35, gt=0, le=1, description="vLLM: fraction of GPU memory for weights + KV cache.")
    vllm_mode: Literal["colocate", "separate"] = Field(
        "colocate", description="vLLM: in this process on the trainer's GPU, or its own process on another GPU (NCCL weight push).")
    vllm_sleep: bool = Field(False, description="vLLM (colocate): free its KV cache and weights between rollouts.")


class TrainConfig(Section):
    steps: int = Field(100, ge=1, le=1_000_000, description="Training steps (policy updates; at most 1,000,000).")
    time_limit_minutes: float = Field(
        0.0, ge=0, description="Stop after the step that ends past this many minutes of training in this process, "
        "with a checkpoint, so a run fits a machine's lease and resumes later with --resume (0 = no limit).")
    lr: float = Field(1e-6, gt=0, description="Peak learning rate (AdamW).")
    prompts_per_step: int = Field(8, ge=1, le=4096, description="Prompts (or documents) per step (at most 4,096).")
    engine: Literal["auto", "torch", "deepspeed"] = Field(
        "auto", description="Optimizer engine: plain torch or DeepSpeed ZeRO; auto = deepspeed on a GPU where it is "
        "installed, else torch (trainer/autotune.py; the run's first event says what was picked).")
    zero_stage: Literal[1, 2, 3] = Field(2, description="DeepSpeed ZeRO stage (engine=deepspeed).")
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL penalty to the frozen base in the loss (0 = off).")
    kl_estimator: Literal["k1", "k3"] = Field("k3", description="Per-token KL estimator: k1 = log ratio, k3 = low-variance.")
    grad_clip: float = Field(1.0, ge=0, description="Clip the global gradient norm to this (0 = no clipping).")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warmup steps, then constant.")
    micro_batch_size: int = Field(8, ge=1, le=4096, description="Sequences per forward/backward; gradients accumulate over the step.")
    clip_low: float = Field(0.2, ge=0, description="PPO clip: ratio lower bound 1 - clip_low.")
    clip_high: float = Field(0.2, ge=0, description="PPO clip: ratio upper bound 1 + clip_high.")
    loss_agg: Literal["token_mean", "seq_sum"] = Field(
        "token_mean", description="Loss averaging: token_mean over all trained tokens of the step, or seq_sum "
        "(Dr.GRPO: per-sequence token sum / max_new_tokens, averaged over sequences).")
    skip_zero_advantage: bool = Field(
        True, description="Skip the forward/backward of samples with advantage 0 when kl_coef and entropy_coef are 0 "
        "(their gradient is exactly zero; they still count in the loss denominator).")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight (0 = entropy is only measured).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="AdamW beta2.")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where to train; auto = cuda when available.")
    gpus: int = Field(1, ge=1, le=64, description="Processes, one per GPU of the machine (data parallel; grpo and "
                      "spice). The worker or `python -m trainer run` launches them; rank 0 reports.")
    share_prompt_prefix: Literal["auto", True, False] = Field(
        "auto", description="Run a group's shared prompt once per micro-batch in the update (exact). auto = per "
        "group, where it cuts the tokens run enough to pay: long prompts (SPICE documents) yes, short ones no "
        "(trainer/autotune.py).")
    packing: Literal["auto", True, False] = Field(
        "auto", description="Pack the update's sequences into one row per micro-batch (no padding; varlen "
        "attention). auto = on a GPU, off on a CPU.")
    micro_batch_tokens: Literal["auto"] | int = Field(
        "auto", description="With packing: most tokens in one packed micro-batch. auto = 16,384 for a 0.5B model on "
        "an 80 GB GPU, scaled down with the parameter count and with the GPU's memory (trainer/autotune.py; a "
        "1.5B full fine-tune ran out of memory at 16,384).")
    offload_optimizer: bool = Field(
        False, description="DeepSpeed: keep fp32 master weights and Adam states in CPU memory (engine=deepspeed).")
    rollout_is_cap: float = Field(
        0.0, ge=0, description="Truncated importance sampling between the rollout engine's log-probs and the "
        "trainer's: each token's loss is weighted by min(pi_trainer / pi_rollout, cap), with the trainer's own "
        "log-probs as the PPO reference (0 = off: the rollout's log-probs are the reference). For rollout.backend=vllm, "
        "and the cap of train.overlap one_step (where 0 means 2).")
    old_logprobs: Literal["auto", "rollout", "trainer"] = Field(
        "auto", description="The PPO reference ('old') log-probs: 'rollout' = the rollout engine's, 'trainer' = the "
        "trainer's own of the pre-update weights (exact: one optimizer step per batch, so the ratio starts at 1), "
        "which also spares the rollout engine from computing log-probs; 'auto' = trainer with rollout.backend=vllm "
        "(its bf16 kernels differ from the trainer's), rollout with hf (same model, same kernels) and for ssp and "
        "score, whose step makes several optimizer steps on one rollout (trainer is refused there).")
    overlap: Literal["auto", "off", "one_step"] = Field(
        "auto", description="Generation and update in flight together (ours, after verl's one-step off-policy recipe): "
        "one_step = while step t's update runs, a thread (its own CUDA stream on a GPU) samples step t+1's batch "
        "from a copy of the weights before that update (step t-1's), so each batch trains one optimizer step after "
        "the weights that sampled it (logged per step as staleness). The loss corrects for that: the PPO reference "
        "is the trainer's own pre-update log-probs and each token's advantage is weighted by min(pi_trainer / "
        "pi_sampled, cap), the cap train.rollout_is_cap or 2 where that is 0 (AReaL's decoupled PPO with a capped "
        "behaviour weight). Costs one more copy of the trained weights in memory. auto = off until one_step is "
        "measured faster on a GPU; the rule it will then apply (grpo, a GPU, at least 64 sequences a step, the hf "
        "backend, weights under a tenth of the GPU's memory) is in trainer/autotune.py.")
    control: Literal["none", "random-reward"] = Field(
        "none", description="A control run: 'random-reward' replaces the answering role's reward (GRPO's policy, "
        "SPICE's Reasoner, SSP's Solver, SCOPE's Solver, SCORE's report writer, pi-Play's student) by a coin flip, "
        "1 with probability control_p, else 0; a writer's reward is computed from the flips as usual. Everything "
        "else is the run's config, so a gain over the control is the reward's, not format drift (Qwen models gain "
        "on math from random rewards: arXiv 2506.10947).")
    control_p: float = Field(0.5, ge=0, le=1, description="Probability of reward 1 in a random-reward control.")
    report_to: Literal["none", "tensorboard", "wandb"] = Field(
        "none", description="Also stream the run's metrics to TensorBoard (event files in the run folder's "
        "tensorboard/) or Weights & Biases (offline, in the run folder's wandb/, when there is no network or no "
        "W&B login; `wandb sync` uploads it later), as TRL's report_to. Optional packages: pip install "
        "'selfplay[tensorboard]' or 'selfplay[wandb]'.")

    @field_validator("overlap", mode="before")
    @classmethod
    def _overlap_off(cls, value):
        # YAML 1.1 reads a bare `off` (and `no`) as false: `overlap: off` in a config file or `--set train.overlap=off`
        # means the setting named off
        return "off" if value is False else value

    @field_validator("micro_batch_tokens", mode="before")
    @classmethod
    def _micro_batch_tokens(cls, value):
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("must be auto or a whole number of tokens >= 1")


class CheckpointConfig(Section):
    every: int = Field(50, ge=0, description="Checkpoint every N steps (0 = only at the end).")
    every_minutes: float = Field(
        0.0, ge=0, description="Also checkpoint at the first step end after every N minutes of training time (the "
        "run's summed step time, saves excluded, counted across resumes; a checkpoint saved before this setting "
        "existed restarts the count at 0; 0 = off): checkpoints at fixed times, for accuracy against wall-clock.")
    keep_last: int = Field(2, ge=1, description="Keep this many newest checkpoints.")
    final: bool = Field(True, description="Also checkpoint the last step (off for throughput benchmarks).")
    background: bool = Field(
        True, description="Write checkpoints in a background thread: the step loop waits only while the weights, "
        "optimizer and RNG state are copied to host memory (and for a previous write still running); the write "
        "itself (temporary folder, fsync, rename) overlaps the next steps, and the run's end waits for it. A crash "
        "mid-write leaves the previous checkpoint whole. false = the loop waits for the whole write.")


class DataConfig(Section):
    path: str | None = file_field(
        None, bundled=True,
        description="JSONL prompt set (prompt, answer), or bundled:gsm8k / bundled:aime2025 / bundled:gpqa.")
    limit: int | None = Field(None, ge=1, description="Use only the first N records.")


class CorpusConfig(Section):
    path: str | None = file_field(
        None, bundled=True, description="JSONL corpus ({title, text} per line) for the standalone search tool.")


class ReviewConfig(Section):
    """What the web platform samples into its human review queue (the trainer itself ignores it)."""

    tasks: float = Field(0.05, ge=0, le=1, description="Share of new tasks sent to human review (hash of the key).")
    rubrics: float = Field(0.05, ge=0, le=1, description="Share of new rubrics sent to human review.")
    grades: float = Field(0.05, ge=0, le=1, description="Share of new grades sent to human review.")
    suspicious: list[Literal["near_duplicate", "judge_disagreement", "extreme_difficulty", "watchdog"]] = Field(
        ["near_duplicate", "judge_disagreement", "extreme_difficulty", "watchdog"],
        description="Detectors whose hits are always reviewed: near-duplicate tasks, judge disagreement across "
        "samples, pass rate 0 or 1, watchdog flags.")
    duplicate_similarity: float = Field(
        0.8, gt=0, le=1, description="Jaccard similarity of two questions' character 5-gram sets at which a task "
        "is a near-duplicate.")
    recent_tasks: int = Field(500, ge=1, description="Recent tasks of the run searched for near-duplicates.")
    min_per_step: int = Field(
        3, ge=0, description="While the run's review queue is short (short_queue), at least this many of each "
        "sampled kind (share above 0) per step go in, the lowest hashes first: at 5% a small step would "
        "otherwise send nothing.")
    short_queue: int = Field(20, ge=0, description="Pending review items of the run under which min_per_step applies.")


class EvalConfig(Section):
    """Automatic evaluations of checkpoints by the web platform (the trainer itself ignores it)."""

    every_checkpoints: int = Field(0, ge=0, description="Evaluate every N-th checkpoint of the run (0 = never).")
    benchmarks: list[str] = Field(
        default_factory=list, description="Benchmark names for automatic evaluations: gsm8k, gpqa-diamond, aime2025, "
        "or a held-out / uploaded set of the Evals page.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N items of each benchmark.")
    search: bool = Field(False, description="Answer with the search tool over the run's corpus.")
    max_new_tokens: int = Field(512, ge=1, description="Token budget of one answer.")


class GateConfig(Section):
    """The task gate (trainer/methods/gate.py): rules every task a model writes must pass before it trains anyone
    (SPICE's Challenger, SSP's Proposer, SCOPE's Challenger, pi-Play's Examiner; each method applies the rules that
    fit its tasks). None of the rules is in the papers; each is ours after a collapse we saw, or another system's."""

    copy_ratio: float = Field(
        0.8, gt=0, le=1, description="A question sharing more than this share of its character 6-grams with its "
        "document is invalid, a lookup (DARC: 0.8). 1 turns it off.")
    example_copy_ratio: float = Field(
        0.5, gt=0, le=1, description="A question sharing more than this share of its character 6-grams with one of "
        "the example questions of its writer's prompt is invalid: it restates the example (SSP's Proposer; SPICE has "
        "its own worked-example rule). 1 turns it off.")
    template_similarity: float = Field(
        0.5, gt=0, le=1, description="Questions whose templates (names and numbers masked) share at least this "
        "word-bigram Jaccard are one cluster; a valid task's writer reward loses its cluster's share of the step's "
        "valid tasks (R-Zero's repetition penalty, BLEU distance 0.5).")
    template_penalty: bool = Field(True, description="Apply the template-cluster penalty (the cluster share is "
                                   "measured either way).")
    chance_correct: bool = Field(
        True, description="Take blind guessing out of a pass rate before the writer's reward: (p - c) / (1 - c), "
        "c = 1/4 for a 4-option MCQ, 1/2 for yes/no.")
    guess_probe: bool = Field(
        True, description="Invalidate a task the solver passes as often when answering at once (guess_max_new_tokens "
        "tokens, no room to reason) as with its full budget, above chance.")
    guess_max_new_tokens: int = Field(16, ge=4, description="Token budget of a guess-probe answer.")
    shuffle_options: bool = Field(
        True, description="Put a multiple-choice task's four options in a random order, its gold letter moved with "
        "its option, before any solver reads it: a writer that always puts the right option first would otherwise "
        "teach the solver a letter, not the content.")
    recall: bool = Field(
        False, description="Invalidate a free-form task with a numeric answer (integer or float) whose question holds "
        "no number to work from (\"How many districts does Warsaw have?\" -> 18): the solver never sees the document, "
        "so it can only recall the number. SPICE's Challenger is then told so in its task prompt. The paper's prompt "
        "asks for all necessary context within the question and no single-fact lookups; this rule and its prompt "
        "line are ours. Off by default: in a GPU run (Qwen2.5-Coder-1.5B, 31 steps) it refused 59% of the Challenger's "
        "attempts by the end and held valid tasks at 4% a step, without steering the Challenger away from recall.")
    consensus_samples: int = Field(
        5, ge=0, description="A reader that sees the document answers the question this many times; the task is "
        "valid only when a strict majority agrees with the writer's answer (DARC / SSP's label check). 0 = off. "
        "Measured on 1,841 tasks of a Qwen2.5-Coder-1.5B SPICE run, each read 15 times: 5 readers reach the 15 "
        "readers' verdict on 92.4% of the tasks (3: 89.5%, 9: 95.6%, 13: 97.9%).")
    consensus_max_new_tokens: int = Field(512, ge=16, description="Token budget of one reader answer.")
    format_penalty: float = Field(
        -1.0, description="Writer reward for an output that does not parse (Absolute Zero: -1).")
    rule_penalty: float = Field(
        -0.5, description="Writer reward for a parsed task a gate rule refused (SPELL: -0.5).")

    @model_validator(mode="after")
    def _penalties(self) -> "GateConfig":
        if self.format_penalty > self.rule_penalty:
            raise ValueError(f"gate.format_penalty ({self.format_penalty}) must not exceed gate.rule_penalty "
                             f"({self.rule_penalty}): an output that does not parse costs at least as much as a task "
                             "a rule refused")
        return self


class WatchdogConfig(Section):
    """Health rules the web platform checks at every step boundary (the trainer itself ignores it).

    A rule fires when its condition holds for ``window`` consecutive reported steps of a role; it
    writes a watchdog event on the run page, and pauses the run when it is listed in ``pause_on``.
    """

    enabled: bool = Field(True, description="Check the health rules at every step boundary.")
    window: int = Field(3, ge=1, description="Consecutive steps a condition must hold before its rule fires.")
    entropy_min: float = Field(0.05, ge=0, description="Entropy collapse: mean token entropy below this.")
    zero_variance_max: float = Field(
        0.9, ge=0, le=1, description="Dead groups: share of groups with zero reward variance above this.")
    length_factor: float = Field(
        3.0, gt=1, description="Length runaway: mean response length above this multiple of the first steps' median.")
    heldout_metric: str = Field(
        "heldout_accuracy", description="Metric name of the held-out check (reported by evals) for the "
        "reward-up / held-out-down rule.")
    heldout_drop: float = Field(
        0.05, ge=0, description="Reward rising while the held-out metric falls by more than this over the window.")
    collapse_share: float = Field(
        0.5, gt=0, le=1, description="Task collapse: a step's valid tasks concentrate on one family when the largest "
        "answer share (answer_share_max) or the largest template cluster (template_cluster_max) of a writing role "
        "is above this.")
    collapse_min_tasks: int = Field(
        8, ge=1, description="Task collapse: a step with fewer valid tasks than this is not judged (a single valid "
        "task is its own 100% family).")
    pause_on: list[Literal["entropy_collapse", "zero_variance", "length_runaway", "reward_heldout_divergence",
                           "collapse"]] = Field(
        ["entropy_collapse", "length_runaway", "collapse"], description="Rules that pause the run when they fire.")


_SHARED = {
    "watchdog": WatchdogConfig, "gate": GateConfig,
    "model": ModelConfig, "rollout": RolloutConfig, "train": TrainConfig,
    "checkpoint": CheckpointConfig, "data": DataConfig, "corpus": CorpusConfig, "review": ReviewConfig,
    "eval": EvalConfig,
}


class _SharedConfig(BaseModel):
    """The whole run config but the methods' own sections, which ``Config`` (below) adds, one optional
    field per entry of ``SECTIONS``. ``cfg.section`` is the method's own section."""

    model_config = {"extra": "forbid", "validate_assignment": True}

    method: Literal[METHOD_NAMES] = Field(
        ..., description=f"Training method: {', '.join(METHOD_NAMES[:-1])} or {METHOD_NAMES[-1]}.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed for python, numpy and torch RNGs (0 to 2^32-1).")
    reward: Literal["exact", "math", "mcq"] = Field(
        "math", description="How a grpo answer is checked against the prompt set's gold answer: exact string, math (equivalent expressions) or mcq (the chosen letter).")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Generation.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Optimisation.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints.")
    data: DataConfig = Field(default_factory=DataConfig, description="Prompt set (grpo).")
    corpus: CorpusConfig = Field(default_factory=CorpusConfig, description="Standalone search corpus.")
    review: ReviewConfig = Field(default_factory=ReviewConfig, description="Human review sampling (web platform).")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Automatic checkpoint evaluations (web platform).")
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig, description="Health rules (web platform).")
    gate: GateConfig = Field(default_factory=GateConfig, description="Task gate of the roles that write tasks.")
    @model_validator(mode="before")
    @classmethod
    def _method_defaults(cls, data: Any) -> Any:
        """Fill the method's section and its paper values for shared keys the user left unset."""
        if not isinstance(data, dict) or not isinstance(data.get("method"), str) or data["method"] not in SECTIONS:
            return data
        data = copy.deepcopy(data)
        method = data["method"]
        if data.get(method) is None:
            data[method] = {}
        planned = SECTIONS[method].schedule_steps(data[method])
        if planned is not None:  # SCOPE, pi-Play: the papers' iterations of two stage blocks
            _setdefault_path(data, "train.steps", planned)
        for path, value in SECTIONS[method].shared_defaults.items():
            _setdefault_path(data, path, value)
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> "_SharedConfig":
        problems = []
        for other in METHOD_NAMES:
            if other != self.method and getattr(self, other) is not None:
                problems.append((other, f"section for method {other!r} given but method is {self.method!r}; remove it"))
        sec = self.section
        planned = sec.schedule_steps(sec.model_dump())
        if planned is not None and "iterations" in sec.model_fields_set and self.train.steps != planned:
            first, second = sec.schedule_fields[1:]  # train.steps was given too (unset, it is the plan)
            problems.append((f"{self.method}.iterations", f"{self.method}.iterations x ({first} + {second}) is "
                             f"{planned} steps but train.steps is {self.train.steps}; leave one of them unset "
                             "(train.steps alone may end the schedule early or repeat it)"))
        if SECTIONS[self.method].needs_prompt_set and not self.data.path:
            problems.append(("data.path", f"method {self.method} needs a JSONL prompt set (prompt, answer) "
                                          "or bundled:gsm8k"))
        reserve = self.rollout.answer_reserve_tokens
        if reserve:
            from trainer.rollout.multi_turn import SEARCH_ROOM

            budgets = {"rollout.max_new_tokens": self.rollout.max_new_tokens, **(sec.search_budgets() if sec else {})}
            for key, budget in budgets.items():
                if reserve > budget - SEARCH_ROOM:
                    problems.append(("rollout.answer_reserve_tokens", f"{reserve} of {key} {budget} leaves no room "
                                     f"for a search (at least {SEARCH_ROOM} tokens: the search call, its result and "
                                     f"its wrapping); lower it, raise {key} to at least {reserve + SEARCH_ROOM}, or "
                                     "set it to 0 (off)"))
        if self.rollout.min_new_tokens > self.rollout.max_new_tokens:
            problems.append(("rollout.min_new_tokens", "must not exceed rollout.max_new_tokens"))
        if self.train.rollout_is_cap > 0 and self.train.old_logprobs == "rollout":
            problems.append(("train.old_logprobs", "train.rollout_is_cap > 0 takes the trainer's log-probs as the "
                             "PPO reference; set train.old_logprobs to auto or trainer, or rollout_is_cap to 0"))
        if self.train.overlap == "one_step":
            problems += self._overlap_problems()
        # a method whose step makes several optimizer steps on one rollout: from the second on, the
        # trainer's own log-probs are no longer those of the weights that sampled
        if self.train.old_logprobs == "trainer" and SECTIONS[self.method].multi_update:
            problems.append(("train.old_logprobs", f"method {self.method} makes several optimizer steps on one "
                             "rollout, so after the first the trainer's log-probs are not those of the weights that "
                             "sampled; set train.old_logprobs to auto or rollout"))
        if self.model.policies == "separate":
            problems += self._separate_policy_problems()
        if self.train.report_to != "none":
            from trainer.report import missing_package

            missing = missing_package(self.train.report_to)
            if missing:
                problems.append(("train.report_to", missing))
        if self.train.engine == "deepspeed" and self.model.lora.r > 0 and self.train.zero_stage == 3:
            problems.append(("train.zero_stage", "ZeRO-3 with LoRA is not supported; use zero_stage 2"))
        if problems:
            raise _CrossCheckError(problems)
        return self

    def _overlap_problems(self) -> list[tuple[str, str]]:
        """train.overlap: one_step runs where it is built: methods that support it, hf rollouts, one GPU."""
        supported = [m for m, s in SECTIONS.items() if s.overlap]
        problems = []
        if not SECTIONS[self.method].overlap:
            problems.append(("train.overlap", f"one_step is supported for {', '.join(supported)}, not {self.method}; "
                             "set train.overlap to off (or auto)"))
        if self.rollout.backend != "hf":
            problems.append(("train.overlap", "one_step samples from a copy of the weights with the hf backend; "
                             "with rollout.backend=vllm set train.overlap to off (or auto)"))
        if self.train.gpus > 1:
            problems.append(("train.overlap", "one_step runs on one GPU (train.gpus: 1); set train.overlap to off "
                             "(or auto) to train on several"))
        if self.train.engine == "deepspeed" and self.train.zero_stage == 3:
            problems.append(("train.overlap", "one_step copies the whole weights, which ZeRO-3 partitions; use "
                             "zero_stage 2 or train.overlap off"))
        if self.train.old_logprobs == "rollout":
            problems.append(("train.old_logprobs", "train.overlap one_step samples with weights one step older than "
                             "the update's, so the PPO reference is the trainer's own log-probs; set "
                             "train.old_logprobs to auto or trainer, or train.overlap to off"))
        return problems

    def _separate_policy_problems(self) -> list[tuple[str, str]]:
        roles = self.section.roles if self.section is not None else ()
        if not roles:
            return [("model.policies", f"method {self.method} does not switch policies per role yet (separate policies "
                     f"are wired for {', '.join(m for m, s in SECTIONS.items() if s.roles)}); set model.policies=shared")]
        problems = []
        if self.model.lora.r == 0:
            problems.append(("model.lora.r", f"model.policies=separate gives each role ({', '.join(roles)}) its own "
                             "LoRA adapter over one frozen base: set model.lora.r > 0 (e.g. 64), or model.policies="
                             "shared to train one set of full weights for every role"))
        if self.train.engine == "deepspeed":
            problems.append(("train.engine", "model.policies=separate keeps one optimizer per role, which the torch "
                             "engine does (auto picks it); set train.engine=torch or model.policies=shared"))
        return problems

    @property
    def trainer_reference(self) -> bool:
        """The update takes the trainer's own pre-update log-probs as the PPO reference."""
        t = self.train
        if t.rollout_is_cap > 0 or t.old_logprobs == "trainer" or t.overlap == "one_step":
            return True
        return t.old_logprobs == "auto" and self.rollout.backend == "vllm" and not SECTIONS[self.method].multi_update

    @property
    def rollout_logprobs(self) -> bool:
        """The rollout engine must report the sampled tokens' log-probs (the reference, or the IS weights)."""
        return self.train.rollout_is_cap > 0 or self.train.overlap == "one_step" or not self.trainer_reference

    @property
    def section(self) -> MethodSection:
        return getattr(self, self.method)

    def to_dict(self) -> dict:
        """Plain dict with only the method's own section (what config.yaml holds). A train.steps that
        ends the schedule early or repeats it is kept without ``iterations`` (the two would contradict
        each other, and a checkpoint's config.yaml is loaded again on resume)."""
        out = self.model_dump(mode="json", exclude={m for m in METHOD_NAMES if m != self.method})
        sec = self.section
        if sec.schedule_steps(sec.model_dump()) not in (None, self.train.steps):
            out[self.method].pop("iterations", None)
        return out


# One optional field per method section, after the shared ones (config.yaml keeps this order).
Config = create_model(
    "Config", __base__=_SharedConfig, __module__=__name__,
    **{name: (section | None, Field(None, description=f"{section.display_name} settings."))
       for name, section in SECTIONS.items()})


class _CrossCheckError(ValueError):
    def __init__(self, problems):
        self.problems = problems
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))


def _setdefault_path(data: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            return  # a wrong type here is reported by validation
        node = child
    node.setdefault(leaf, value)


def parse_override(text: str) -> tuple[list[str], Any]:
    """'train.lr=2e-6' -> (['train', 'lr'], 2e-06); the value is read as YAML (lists, bools, null)."""
    if "=" not in text:
        raise ValueError(f"override {text!r} must look like key.path=value, e.g. train.lr=2e-6")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ValueError(f"override {text!r} has an empty key part")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, RecursionError):
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> tuple[dict, list[tuple[str, str]]]:
    """Set each key.path=value into a copy of ``data``; returns (data, problems)."""
    data = copy.deepcopy(data)
    problems = []
    for text in overrides or []:
        try:
            parts, value = parse_override(text)
        except ValueError as exc:
            problems.append(("--set", str(exc)))
            continue
        node = data
        for i, key in enumerate(parts[:-1]):
            if node.get(key) is None:
                node[key] = {}
            if not isinstance(node[key], dict):
                problems.append((".".join(parts[: i + 1]), f"is not a section, cannot set {'.'.join(parts)}"))
                break
            node = node[key]
        else:
            node[parts[-1]] = value
    return data, problems


MAX_CONFIG_DEPTH = 32  # a config is a few levels of key: value; deeper is refused whatever the recursion limit


def nests_too_deeply(data, limit: int = MAX_CONFIG_DEPTH) -> bool:
    """Whether parsed YAML nests lists/mappings deeper than ``limit`` (walked without recursion: a parser in a
    process whose recursion limit something raised, torch's inductor does, reads 600 levels without a RecursionError)."""
    todo = [(data, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        todo.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def read_yaml(path: Path) -> dict:
    """A config file's mapping; ConfigError naming what is wrong with the file (missing, unreadable, not YAML, not
    UTF-8, nested too deeply, not a mapping)."""
    if not path.is_file():
        raise ConfigError([("", f"config file {path} does not exist")])
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"{path} is not valid YAML: {exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([("", f"{path} is not UTF-8 text (byte {exc.start}); save the config as UTF-8 YAML")]) from None
    except RecursionError:
        raise ConfigError([("", f"{path} nests too deeply to read; a config is a few levels of key: value")]) from None
    except OSError as exc:
        raise ConfigError([("", f"cannot read {path}: {exc.strerror}")]) from None
    if nests_too_deeply(data):
        raise ConfigError([("", f"{path} nests too deeply to read; a config is a few levels of key: value")])
    if not isinstance(data, dict):
        raise ConfigError([("", f"{path} must hold a mapping of keys, got {type(data).__name__}")])
    return data


def load_config(source: str | Path | dict | Config, overrides: list[str] | None = None) -> Config:
    """A validated Config from a YAML path, a dict or a Config, with key=value overrides applied."""
    if isinstance(source, Config):
        if not overrides:
            return source
        source = source.to_dict()
    data = copy.deepcopy(source) if isinstance(source, dict) else read_yaml(Path(source))
    data, problems = apply_overrides(data, overrides or [])
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        problems += _explain(exc)
        problems += _cross_problems_despite(exc, data, problems)
    else:
        if not problems:
            return cfg
    raise ConfigError(problems)


def _cross_problems_despite(exc: ValidationError, data: dict, known: list) -> list[tuple[str, str]]:
    """Cross-key problems hidden behind field errors: drop the bad keys (defaults apply), validate again."""
    repaired = copy.deepcopy(data)
    for err in exc.errors():
        node, loc = repaired, [p for p in err["loc"] if isinstance(p, str)]
        for key in loc[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and loc:
            node.pop(loc[-1], None)
    try:
        Config.model_validate(repaired)
    except ValidationError as again:
        known_paths = {path for path, _ in known}
        return [p for p in _explain(again) if p[0] not in known_paths]
    return []


_SHORT = reprlib.Repr()  # bad values are echoed briefly (a 10 MB string or a deep structure is not)
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 2, 80, 80, 5, 5


def _explain(exc: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _CrossCheckError):
            problems += ctx_error.problems
            continue
        path = ".".join(loc)
        if err["type"] == "extra_forbidden":
            problems.append((path, "unknown key" + _hint(loc)))
        elif err["type"] == "missing":
            problems.append((path, "required key is missing"))
        elif loc[-1].endswith(("api_key", "_endpoint")):  # a refused key or URL with one is not echoed
            problems.append((path, err["msg"]))
        else:
            problems.append((path, f"{err['msg']} (got {_SHORT.repr(err.get('input'))})"))
    return problems


def _hint(loc: list[str]) -> str:
    """'; did you mean train.lr?' from the known keys of the section holding the unknown key."""
    model: type[BaseModel] = Config
    for key in loc[:-1]:
        field = model.model_fields.get(key)
        sub = _model_of(field.annotation) if field else None
        if sub is None:
            return ""
        model = sub
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    known = ", ".join(model.model_fields)
    return f"; did you mean {'.'.join(loc[:-1] + close)}?" if close else f"; known keys here: {known}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def save_config(cfg: Config, path: str | Path) -> Path:
    """Write the full resolved config as YAML (every value explicit)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
    return path


# Top-level keys only some methods read: the other methods' forms leave them out.
ONLY_FOR = {"reward": ("grpo",), "data": ("grpo",)}


def method_fields(method: str) -> list[dict[str, Any]]:
    """Every leaf field of a method's config: path, type, default, help, choices, min, max.

    Defaults are the method's (paper values for shared keys). The web builds forms from this;
    keys another method alone reads (``ONLY_FOR``: grpo's ``reward`` and ``data``) are left out.
    """
    if method not in SECTIONS:
        raise ConfigError([("method", f"unknown method {method!r}; choose one of {', '.join(METHOD_NAMES)}")])
    defaults = Config.model_validate({"method": method, "data": {"path": "-"}}).to_dict()
    defaults["data"]["path"] = DataConfig.model_fields["path"].default
    rows: list[dict[str, Any]] = []
    for name, field in Config.model_fields.items():
        if name in METHOD_NAMES and name != method or method not in ONLY_FOR.get(name, (method,)):
            continue
        sub = _model_of(field.annotation)
        if sub is not None:
            _walk(sub, [name], defaults[name], rows)
        elif name != "method":
            rows.append(_describe([name], field, defaults[name]))
    return rows


def _walk(model: type[BaseModel], prefix: list[str], defaults: dict, rows: list) -> None:
    for name, field in model.model_fields.items():
        sub = _model_of(field.annotation)
        if sub is not None:
            _walk(sub, prefix + [name], defaults[name], rows)
        else:
            rows.append(_describe(prefix + [name], field, defaults[name]))


def _describe(path: list[str], field, default) -> dict[str, Any]:
    row = {"path": ".".join(path), "type": _type_name(field.annotation), "default": default,
           "help": field.description or "", "choices": _choices(field.annotation), "min": None, "max": None}
    for meta in field.metadata:
        for attr, key in (("ge", "min"), ("gt", "min"), ("le", "max"), ("lt", "max")):
            if getattr(meta, attr, None) is not None:
                row[key] = getattr(meta, attr)
    return row


def _choices(annotation) -> list | None:
    """Allowed values of a Literal, Optional[Literal] or list[Literal] field."""
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    for arg in get_args(annotation):
        if arg is not type(None) and _choices(arg):
            return _choices(arg)
    return None


def _type_name(annotation) -> str:
    """int | float | str | bool | choice | list | int_or_choice | float_or_choice (Optional unwrapped; a
    Literal-or-list union is a list; a Literal-or-int union, ``train.micro_batch_tokens: auto | 4096``, is
    int_or_choice; a Literal-or-float union, ``model.lora.lr: auto | train | 1e-5``, is float_or_choice)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return "choice"
    if origin is list:
        return "list"
    if isinstance(annotation, type):
        return annotation.__name__
    args = [a for a in get_args(annotation) if a is not type(None)]
    if any(get_origin(a) is list for a in args):
        return "list"
    if int in args and any(get_origin(a) is Literal for a in args):
        return "int_or_choice"
    if float in args and any(get_origin(a) is Literal for a in args):
        return "float_or_choice"
    return _type_name(args[0]) if args else "str"
