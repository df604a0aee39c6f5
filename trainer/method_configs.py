"""One config section per method: the knobs a recipe reads from ``cfg.<method>``.

Defaults are the papers' values as condensed in specs/methods.md; a choice a paper leaves
open (or that we make differently) is marked "ours" in its description. Each section also
names the paper's values for the SHARED keys (``shared_defaults``: learning rate, KL, group
size ...): ``trainer.config`` fills those in when the user leaves them unset, so a SPICE run
gets lr 1e-6 and no KL without the user writing it, while ``--set train.lr=...`` still wins.

Every field carries a description: the web builds its launch form from them
(``trainer.config.method_fields``).

Each section also states the method's facts as class attributes, the one place the trainer and
the web read them from (``SECTIONS[method].needs_corpus``, or ``cfg.section`` for a loaded config):
what it trains on (``needs_corpus`` / ``needs_prompt_set``), the ``roles`` that may each have a
policy of their own (and the ``answer_role`` an evaluation loads), whether a step makes
several optimizer steps on one rollout (``multi_update``), whether it shards a step over several
GPUs (``multi_rank``), whether it runs ``train.overlap: one_step`` (``overlap``), whether a person may edit its evaluator harness (``has_harness``), and
whether a role is judged by the frozen base (``judged_by_frozen_base()``, which may read the
section's own values), and the per-step metrics of its run-page panel (``panel_metrics``). A new
method states them in its section and nowhere else; ``Config`` gets one field per entry of
``SECTIONS``.
"""
from __future__ import annotations

import re
from typing import ClassVar, Literal, Optional
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer.paths import file_field

_NUMBERS = (int, float, Optional[int], Optional[float])


KEY_REF = re.compile(r"env:[A-Za-z_][A-Za-z0-9_]*|sealed:[A-Za-z0-9_=-]+")


def check_key_ref(value: str | None) -> str | None:
    """An API key field holds a reference, never the key: ``env:NAME`` (the worker's environment)
    or ``sealed:...`` (encrypted by the web server, opened only by its worker). A key written
    into a config would land in config.yaml, checkpoints and exports (and config errors do not
    echo these fields' values: trainer.config._explain)."""
    if value is None or KEY_REF.fullmatch(value):
        return value
    raise ValueError("give the API key as env:NAME, the name of an environment variable that holds it "
                     "(a key in the config would be written to config.yaml and checkpoints); "
                     "the web form and the API also take the key itself and store it encrypted")


def key_ref_field(endpoint: str):
    """An endpoint's API key setting (a reference: ``check_key_ref``), worded alike in every section."""
    return Field(None, description=f"The {endpoint} endpoint's API key as env:NAME (read from the environment variable "
                 "NAME; unset: $SELFPLAY_JUDGE_API_KEY). Typed into the web form or the API, the key itself is stored "
                 "encrypted.")


def endpoint_checks(endpoint_field: str, key_field: str):
    """The validators of a section's endpoint URL and API key fields (``check_endpoint``, ``check_key_ref``), for
    its body: ``_endpoint, _key_ref = endpoint_checks("judge_endpoint", "judge_api_key")``."""
    return (field_validator(endpoint_field)(lambda cls, v: check_endpoint(v)),
            field_validator(key_field)(lambda cls, v: check_key_ref(v)))


CREDENTIAL_PARAM = re.compile(r"(?i)key|token|secret|passw|auth|^sig$|signature")


def check_endpoint(value: str | None) -> str | None:
    """An endpoint URL is an http(s) URL (file:, ftp: ... are refused), stored and shown with the config: no
    credentials in it. Which hosts a web run may call is the web's rule (trainer/endpoints.py: destination_problem)."""
    if value is None:
        return value
    parts = urlsplit(value)
    try:
        host = parts.hostname
    except ValueError:
        host = None
    if parts.scheme not in ("http", "https") or not host:
        raise ValueError("must be an http(s) base URL such as https://api.example.org/v1 or http://host:8000/v1")
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if parts.username or parts.password or any(CREDENTIAL_PARAM.search(n) for n in names):
        raise ValueError("put no credentials in the endpoint URL (it is stored and shown with the run's config); "
                         "give the key in the matching *_api_key field")
    return value


def dotted(values: dict, path: str, default=0):
    """``values["a"]["b"]`` for path "a.b", or ``default`` where it is missing."""
    for part in path.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return default if values is None else values


class Section(BaseModel):
    """A strict config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)  # inf/nan: never meant

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value, info):
        """pydantic would read ``steps: true`` (YAML ``yes``) as 1; a boolean for a number is a mistake."""
        if isinstance(value, bool) and cls.model_fields[info.field_name].annotation in _NUMBERS:
            raise ValueError("a number is needed here, not true/false")
        return value


class MethodSection(Section):
    """A method's own section: its knobs, the paper values of shared keys, and the method's facts."""

    # Paper values for shared keys, as dotted path -> value; applied when the user sets none.
    shared_defaults: ClassVar[dict[str, object]] = {}
    display_name: ClassVar[str] = ""  # how pages and messages name the method ("pi-Play")
    # A role of the method writes tasks that go through the task gate (trainer/methods/gate.py), and how its
    # "answer in question" check reads a copy: whole words / numbers by value, or a substring (SSP's reference code).
    writes_tasks: ClassVar[bool] = False
    answer_copy: ClassVar[str] = "whole_words"
    # applies gate.recall to its tasks (a solver that never sees the document; SSP's can search, pi-Play's too)
    recall_rule: ClassVar[bool] = False
    # The roles whose recipe switches policy per role (model.policies=separate: one LoRA adapter each).
    roles: ClassVar[tuple[str, ...]] = ()
    # The role a checkpoint's evaluation loads, when each role has its own adapter.
    answer_role: ClassVar[str | None] = None
    needs_corpus: ClassVar[bool] = True  # reads documents and searches a corpus (the web's chosen corpus)
    needs_prompt_set: ClassVar[bool] = False  # trains on a JSONL prompt set (data.path) checked by the `reward` verifier
    multi_update: ClassVar[bool] = False  # several optimizer steps on samples drawn before the first of them
    multi_rank: ClassVar[bool] = False  # shards a step's inputs over ranks (train.gpus > 1)
    overlap: ClassVar[bool] = False  # runs train.overlap one_step (samples the next batch during the update)
    has_harness: ClassVar[bool] = False  # an evaluator harness a person may edit during the run
    # (role, metric name, column label): the per-step metrics of the run page's method panel (a
    # column the run never reported is left out; the panel is the template runs/_method_<name>.html)
    panel_metrics: ClassVar[tuple[tuple[str, str, str], ...]] = ()

    def judged_by_frozen_base(self) -> bool:
        """A role is judged by the frozen base model (it must be kept next to the policy)."""
        return False

    def search_budgets(self) -> dict[str, int]:
        """The section's own token budgets of searching rollouts that keep ``rollout.answer_reserve_tokens``, set
        in place of rollout.max_new_tokens (config key -> tokens); the config checks each leaves a search room."""
        return {}

    # Whether step_tokens counts every sequence a step generates (else judge calls and extra turns
    # come on top of it: "at least").
    step_tokens_exact: ClassVar[bool] = False

    @classmethod
    def step_tokens(cls, values: dict) -> tuple[int, int]:
        """(sequences, most tokens generated) in one step of a config dict (nested keys, what the
        launch form holds): by default every prompt's group at rollout.max_new_tokens each.

        >>> MethodSection.step_tokens({"train": {"prompts_per_step": 2},
        ...                            "rollout": {"group_size": 4, "max_new_tokens": 100}})
        (8, 800)
        """
        prompts, group = int(dotted(values, "train.prompts_per_step", 1)), int(dotted(values, "rollout.group_size", 1))
        return prompts * group, prompts * group * int(dotted(values, "rollout.max_new_tokens", 1))

    # Two-stage methods (SCOPE, pi-Play): the section fields whose iterations x (first + second)
    # steps make the run's default length (train.steps), as (iterations, first stage, second stage).
    schedule_fields: ClassVar[tuple[str, str, str] | None] = None

    @classmethod
    def schedule_steps(cls, given: dict) -> int | None:
        """Steps of the whole alternating schedule from the section as given (defaults filled), or
        None for a one-stage method or values that validation will refuse."""
        if cls.schedule_fields is None or not isinstance(given, dict):
            return None
        values = [given.get(name, cls.model_fields[name].default) for name in cls.schedule_fields]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            return None
        iterations, first, second = values
        return iterations * (first + second)


class GrpoSection(MethodSection):
    """Plain GRPO on a prompt set with a verifier (the baseline every paper compares against)."""

    display_name: ClassVar[str] = "GRPO"
    step_tokens_exact: ClassVar[bool] = True
    needs_corpus: ClassVar[bool] = False
    needs_prompt_set: ClassVar[bool] = True
    multi_rank: ClassVar[bool] = True
    overlap: ClassVar[bool] = True

    shared_defaults: ClassVar[dict[str, object]] = {
        "train.lr": 1e-6, "rollout.group_size": 8, "train.kl_coef": 0.0, "train.prompts_per_step": 8,
    }
    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce"] = Field(
        "grpo", description="Advantage estimator: grpo = (r - group mean) / group std; dr_grpo = no std division.")
    system_prompt: str = Field(
        "Please reason step by step, and put your final answer within \\boxed{}.",
        description="System message of every prompt (ours: asks for a boxed answer so the verifier can find it).")
    prompt_key: str = Field("prompt", description="JSONL field holding the prompt text.")
    answer_key: str = Field("answer", description="JSONL field holding the gold answer.")
    shuffle: bool = Field(True, description="Shuffle the prompt set each epoch (seeded).")
    log_samples: int = Field(8, ge=0, description="Attempts per step sent to the sink as samples (0 = none).")


# The task gate's rules (trainer/methods/gate.py RULES, kept equal by a test): each logs gate_<rule>_rate per step.
GATE_RULES = ("answer_in_question", "no_words", "refers_to_document", "not_grounded", "copy_ratio", "repeated",
              "repeated_answer", "options", "recall", "consensus", "guessable")


class SpiceSection(MethodSection):
    """SPICE: a Challenger writes tasks from corpus documents, a Reasoner answers without them."""

    display_name: ClassVar[str] = "SPICE"
    writes_tasks: ClassVar[bool] = True
    recall_rule: ClassVar[bool] = True
    step_tokens_exact: ClassVar[bool] = True
    multi_rank: ClassVar[bool] = True
    multi_update: ClassVar[bool] = True  # mini_batch_size: several optimizer steps on one iteration's rollout
    # the run page's collapse view (runs/_method_spice.html): the gate's refusals by rule (stacked), the largest
    # answer share and template cluster of the valid tasks, the guess probe's pass rate
    panel_metrics: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("challenger", "valid_rate", "valid tasks"),
        *(("challenger", f"gate_{rule}_rate", rule.replace("_", " ")) for rule in GATE_RULES),
        ("challenger", "answer_share_max", "largest answer share"),
        ("challenger", "template_cluster_max", "largest template cluster"),
        ("challenger", "guess_pass_rate", "guess-probe pass rate"), ("challenger", "consensus_rate", "reader agrees"),
        ("challenger", "mcq_letter_share_max", "MCQ: largest share of one right letter, as written"),
        ("challenger", "pass_rate_mean", "Reasoner pass rate"), ("reasoner", "accuracy", "Reasoner accuracy"),
        ("challenger", "optimizer_steps", "optimizer steps"))

    shared_defaults: ClassVar[dict[str, object]] = {
        "train.lr": 1e-6, "rollout.group_size": 8, "train.kl_coef": 0.0, "train.prompts_per_step": 128,  # G=8 Reasoner answers
        "train.steps": 640, "rollout.temperature": 1.0, "train.warmup_steps": 0,
        # Dr.GRPO: each sequence's token sum over a constant, the generation budget (rollout.max_new_tokens)
        "train.loss_agg": "seq_sum",
        # The paper's text gives no response budget (its appendix table is not in it); ours 8192, SSP's and
        # SCOPE's, so a base model's step-by-step answer is rarely cut. It is also Dr.GRPO's constant.
        "rollout.max_new_tokens": 8192,
    }
    challenger_attempts: int = Field(
        8, ge=1, description="Challenger attempts drawn per document in each retry round (ours: the paper gives "
        "no round size).")
    max_challenger_attempts: int = Field(
        1024, ge=1, description="Most Challenger attempts per document: rounds go on until the document has "
        "valid_tasks_per_document valid tasks or this many attempts (paper 1024).")
    valid_tasks_per_document: int = Field(
        1, ge=1, description="A document's retry rounds stop once it has this many valid tasks (paper: at least one).")
    challenger_token_budget: int | None = Field(
        None, ge=1, description="Safety bound of the retry loop: most Challenger tokens a step may generate per "
        "document, pooled over the step's documents and checked at the worst case before each round (the first "
        "round always runs). None = one round's worst case on a GPU, challenger_attempts x "
        "(format_max_new_tokens + task budget): retries then spend only what early stops saved; on a CPU none "
        "(latency-bound decoding: a retry round of one document costs as long as the first), so a step keeps its "
        "one-round time (ours).")
    challenger_group_size: int = Field(
        8, ge=1, description="Challenger trajectories kept per document, preserving the valid:invalid ratio (paper: 8).")
    reasoner_tasks_per_document: int = Field(
        1, ge=1, description="Valid tasks per document used as Reasoner training groups (ours: one).")
    challenger_reward: Literal["gaussian", "absolute_zero", "threshold", "r_zero"] = Field(
        "gaussian", description="Challenger reward: gaussian variance reward (paper) or an ablation.")
    invalid_penalty: float | None = Field(
        None, description="Challenger reward for every invalid task (paper: -0.1). None = the task gate's: "
        "gate.format_penalty (-1) for an output that does not parse, gate.rule_penalty (-0.5) for a task a rule "
        "refused (ours, after Absolute Zero and SPELL).")
    think_before_task: bool = Field(
        True, description="The Challenger's task turn reasons step by step before its JSON, as the paper's prompt asks "
        "('FIRST, think step-by-step ... THEN, provide ... JSON'); the last JSON object with the task's fields is "
        "parsed. False = the turn opens with the JSON (ours, for models too small to write JSON after reasoning).")
    mini_batch_size: int = Field(
        128, ge=0, description="Trajectories per optimizer step: an iteration's samples (both roles) are shuffled and "
        "split into mini-batches of this size, one optimizer step each (paper: 128 trajectories per gradient "
        "update). 0 = one optimizer step per iteration.")
    gaussian_tau: float = Field(
        0.01, gt=0, description="Width of the gaussian reward exp(-(p(1-p)-0.25)^2 / (2 tau)) (paper: 0.01).")
    advantage: Literal["dr_grpo", "grpo"] = Field(
        "dr_grpo", description="Advantages per role group: dr_grpo = reward minus group mean (paper).")
    formats: list[Literal["mcq", "free_form"]] = Field(
        ["mcq", "free_form"], min_length=1, description="Task formats the Challenger may choose.")
    answer_types: list[Literal["integer", "float", "expression", "string", "boolean"]] = Field(
        ["integer", "expression", "string"], min_length=1,
        description="Free-form answer types the Challenger may choose (paper, Fig. 9: Integer, Expression, String). "
        "float and boolean are ours, opt-in: a boolean task is passed half the time by a blind guess (the task gate "
        "corrects pass rates for chance, gate.chance_correct).")
    max_string_answer_words: int = Field(
        3, ge=1, description="A string answer longer than this many words makes the task invalid (paper: 1-3 words).")
    max_document_tokens: int = Field(6000, ge=64, description="Documents are truncated to this many tokens (paper ~6k).")
    format_max_new_tokens: int = Field(
        256, ge=16, description="Token budget of the Challenger's first turn, the format-choice JSON (ours).")
    task_max_new_tokens: int | None = Field(
        None, ge=16, description="Token budget of the Challenger's second turn, the task JSON (None = "
        "rollout.max_new_tokens; the paper's prompts ask for reasoning before the JSON).")
    reasoner_max_new_tokens: int | None = Field(
        None, ge=16, description="Token budget of one Reasoner answer (None = rollout.max_new_tokens, 8192 for SPICE: "
        "the paper's text gives none).")
    worked_example: bool = Field(
        False, description="Show the Challenger a filled-in task for another document after the task's JSON form "
                           "(ours; the paper shows none). On for SmolLM2-135M (0/16 valid tasks without it); off "
                           "by default: Qwen2.5-Coder-0.5B wrote no grounded task with it, only word problems "
                           "imitating it (benchmarks/RESULTS.md). A task restating it is invalid either way.")
    require_grounding: bool = Field(
        True, description="A question sharing no content word (a name, a term, a number of two or more digits) with "
                          "its document is invalid (ours: the paper's prompt asks for tasks from the document; "
                          "Qwen2.5-Coder-1.5B's Challenger collapsed to 'How many correct answers? -> 1' without it). "
                          "Documents with fewer than 5 Latin-script words are not checked.")
    max_answer_share: float = Field(
        0.25, gt=0, le=1, description="A free-form answer the Challenger gives for more than this share of a step's "
        "documents (and for 3 or more of them; a document counts once, split over its tasks' answers; numbers "
        "compared by value) makes every task with it invalid, 'answer repeated across documents' (ours, training "
        "only: the Reasoner could guess it without reading; Qwen2.5-Coder-1.5B's Challenger collapsed to answers "
        "1 and 2 on 94 of 96 documents). MCQ letters are exempt. 1.0 turns it off.")

    @model_validator(mode="after")
    def _retry_cap(self) -> "SpiceSection":
        if self.max_challenger_attempts < self.challenger_attempts:
            raise ValueError(f"max_challenger_attempts ({self.max_challenger_attempts}) must be at least "
                             f"challenger_attempts ({self.challenger_attempts}), the attempts of one retry round")
        return self

    @classmethod
    def step_tokens(cls, values: dict) -> tuple[int, int]:
        """Per document one Challenger round (challenger_attempts x (format_max_new_tokens +
        max_new_tokens)) plus the Reasoner's reasoner_tasks_per_document x group_size answers."""
        prompts, group = int(dotted(values, "train.prompts_per_step", 1)), int(dotted(values, "rollout.group_size", 1))
        new = int(dotted(values, "rollout.max_new_tokens", 1))
        attempts = int(dotted(values, "spice.challenger_attempts", 1))
        fmt = int(dotted(values, "spice.format_max_new_tokens", 0))
        tasks = int(dotted(values, "spice.reasoner_tasks_per_document", 1))
        return prompts * (attempts + tasks * group), prompts * (attempts * (fmt + new) + tasks * group * new)


class SspSection(MethodSection):
    """SSP: a Proposer searches and writes a question for a known answer, a Solver searches to answer."""

    display_name: ClassVar[str] = "SSP"
    writes_tasks: ClassVar[bool] = True
    answer_copy: ClassVar[str] = "substring"
    multi_update: ClassVar[bool] = True  # Solver then Proposer, each in mini_batch_size mini-batches

    shared_defaults: ClassVar[dict[str, object]] = {
        "train.lr": 1e-6, "train.warmup_steps": 5, "rollout.group_size": 5, "train.kl_coef": 0.01,
        "train.kl_estimator": "k3", "train.clip_high": 0.285, "train.prompts_per_step": 256,
        "train.steps": 200, "rollout.temperature": 1.0, "rollout.max_new_tokens": 8192,
    }
    mini_batch_size: int = Field(
        128, ge=1, description="PPO mini-batch in prompts: each role takes batch / this optimizer steps per step (paper 128).")
    max_prompt_tokens: int = Field(4096, ge=64, description="Longest prompt, RAG materials included (paper 4096).")
    max_turns: int = Field(10, ge=1, description="Most tool turns per trajectory (paper 10).")
    top_k: int = Field(3, ge=1, description="Passages per search (paper 3).")
    answer_source: Literal["corpus", "list"] = Field(
        "corpus", description="Answers to start from: corpus = document titles and short named spans (ours), "
                              "list = the file in answers_path.")
    answers_path: str | None = file_field(
        None, description="answer_source=list: a .txt (one answer per line) or .jsonl ({answer}).")
    answer_title_fraction: float = Field(
        0.5, ge=0, le=1, description="answer_source=corpus: share of answers that are document titles, the rest spans (ours).")
    answer_max_words: int = Field(5, ge=1, description="answer_source=corpus: longest answer in words (ours).")
    required_searches: list[int] = Field(
        [2, 3, 4], min_length=1, description="Searches the Proposer is asked for, drawn uniformly per answer (ours).")
    proposer_samples: int = Field(
        1, ge=1, description="Proposer trajectories per answer (paper: 1 with REINFORCE; 5 for the GRPO ablation).")
    proposer_advantage: Literal["reinforce", "grpo"] = Field(
        "reinforce", description="Proposer: REINFORCE, raw reward as advantage (paper); grpo needs proposer_samples > 1.")
    solver_advantage: Literal["dr_grpo", "grpo", "rloo"] = Field(
        "dr_grpo", description="Solver advantage over its n answers: dr_grpo = r - group mean, the paper's Eq. 4 "
        "(1 correct of 5: +0.8 / -0.2); grpo also divides by the group std, as verl's 'GRPO' does by default "
        "(the paper's appendix table names the estimator GRPO): +1.79 / -0.45.")
    invalid_reward: float = Field(
        0.0, description="Proposer reward for a question failing the filters or RAG check (paper 0; -0.1 collapsed).")
    rag_check: bool = Field(True, description="Keep a question only if the solver answers it from the proposer's passages.")
    rag_noise_passages: int = Field(4, ge=0, description="Noise passages added in the RAG check (paper 4).")
    rag_max_new_tokens: int = Field(
        256, ge=8, description="Token budget of the RAG check answer (reference code 70 tokens; ours 256, so the "
        "<= 50 words of reasoning the prompt asks for and the answer after them are not cut).")
    rag_temperature: float = Field(
        0.1, ge=0, description="Sampling temperature of the RAG check (the paper gives none; the reference code "
        "answers at 0.1: a near-greedy check, so a question is not dropped for an unlucky sample).")
    batch_fill: Literal["replay", "none"] = Field(
        "replay", description="Slots whose question failed: refill from the replay buffer (paper: Table 5's periodic "
        "reset, its main setting) or leave empty.")
    replay_reset_every: int = Field(10, ge=1, description="Clear the replay buffer of validated questions every N steps "
                                    "(paper 10).")
    replay_max_repeats: int | None = Field(
        2, ge=1, description="Most slots of one Solver batch a replayed question may fill (ours; the paper's buffer has "
        "no cap: at a 1-6% valid rate one batch repeated a few questions dozens of times). None = no cap.")
    min_searches: int = Field(2, ge=0, description="Rule filter: the proposer made at least this many searches.")
    question_min_chars: int = Field(10, ge=0, description="Rule filter: shortest question in characters.")
    question_max_chars: int = Field(1000, ge=1, description="Rule filter: longest question in characters.")
    question_min_words: int = Field(10, ge=0, description="Rule filter: fewest words in a question.")
    answer_tag_limit: int = Field(10, ge=1, description="More answer tags than this divides the solver reward.")
    answer_tag_divisor: float = Field(4.0, gt=0, description="Divisor applied above the answer-tag limit (paper 4).")
    judge: Literal["frozen_base", "endpoint", "exact"] = Field(
        "frozen_base", description="Answer judge (ours: frozen base by default; an OpenAI-compatible endpoint; or exact match).")
    judge_max_new_tokens: int = Field(
        1024, ge=8, description="Token budget of one Correct/Wrong verdict (the reference code gives its one-word "
        "judge 10; ours 1024, so a thinking judge can reason before the verdict: a one-word judge stops at its end "
        "of sequence anyway).")
    judge_needs_shared_word: bool = Field(
        True, description="An answer sharing no content word (name, term, number) with the reference answer is Wrong "
        "without asking the judge (ours, not the paper's: the frozen 1.5B base accepted 14 of 38 Solver answers "
        "that shared no word with their reference, e.g. a river's name for the answer 'Semen'). Off for a judge "
        "trusted with aliases that share no word ('USA' for 'United States').")
    judge_endpoint: str | None = Field(None, description="Base URL of an OpenAI-compatible judge (judge=endpoint).")
    judge_model: str | None = Field(None, description="Model name sent to the judge endpoint.")
    judge_api_key: str | None = key_ref_field("judge")

    _endpoint, _key_ref = endpoint_checks("judge_endpoint", "judge_api_key")

    def judged_by_frozen_base(self) -> bool:
        return self.judge == "frozen_base"

    @model_validator(mode="after")
    def _needs(self) -> "SspSection":
        problems = []
        if self.answer_source == "list" and not self.answers_path:
            problems.append("answer_source=list needs answers_path (a .txt or .jsonl file of answers)")
        if self.judge == "endpoint" and not (self.judge_endpoint and self.judge_model):
            problems.append("judge=endpoint needs judge_endpoint (base URL) and judge_model")
        if self.proposer_advantage == "grpo" and self.proposer_samples < 2:
            problems.append("proposer_advantage=grpo needs proposer_samples >= 2 (one sample has no group)")
        if any(n < 1 for n in self.required_searches):
            problems.append("required_searches must all be >= 1")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class ScopeSection(MethodSection):
    """SCOPE: a Challenger writes open-ended tasks, the frozen base gates and writes rubrics, a Solver answers."""

    schedule_fields: ClassVar[tuple[str, str, str]] = ("iterations", "challenger_steps", "solver_steps")
    display_name: ClassVar[str] = "SCOPE"
    writes_tasks: ClassVar[bool] = True

    def judged_by_frozen_base(self) -> bool:
        return True

    shared_defaults: ClassVar[dict[str, object]] = {
        "train.lr": 1e-6, "rollout.group_size": 8, "train.kl_coef": 1e-3, "train.grad_clip": 1.0,
        "train.prompts_per_step": 64, "train.warmup_steps": 1,
        "rollout.max_new_tokens": 8192, "model.policies": "separate", "model.lora.r": 64,  # two policies (paper)
    }  # train.steps: iterations x (challenger_steps + solver_steps) = 3 x 40 = 120 (schedule_steps)
    roles: ClassVar[tuple[str, ...]] = ("challenger", "solver")
    answer_role: ClassVar[str | None] = "solver"
    iterations: int = Field(
        3, ge=1, description="Challenger/Solver alternations (paper 3): train.steps defaults to iterations x "
        "(challenger_steps + solver_steps); a train.steps you set yourself may end the schedule early or repeat it.")
    challenger_steps: int = Field(20, ge=1, description="Challenger steps per iteration (paper 20).")
    solver_steps: int = Field(20, ge=1, description="Solver steps per iteration (paper 20).")
    challenger_prompts_per_step: int = Field(64, ge=1, description="Challenger prompts per step (paper 64).")
    solver_prompts_per_step: int = Field(256, ge=1, description="Solver prompts per step (paper 256).")
    scoring_rollouts: int = Field(8, ge=1, description="Previous-Solver rollouts scoring each Challenger task (paper 8).")
    filter_rollouts: int = Field(4, ge=1, description="Solver rollouts for the stage-2 difficulty filter (paper 4).")
    filter_low: float = Field(0.2, ge=0, le=1, description="Keep tasks whose mean rubric score is at least this.")
    filter_high: float = Field(0.8, ge=0, le=1, description="Keep tasks whose mean rubric score is at most this.")
    solver_tasks: int | None = Field(
        None, ge=1, description="Tasks the Solver stage's pool is filled with at its start, from the Challenger just "
        "trained (paper 5,120; None = solver_steps x solver_prompts_per_step, the paper's 20 x 256 = 5,120).")
    task_types: list[str] = Field(
        ["long_form_qa", "summarisation", "planning", "writing"], min_length=1, description="Task types drawn uniformly.")
    search_turn_weights: list[float] = Field(
        [4, 3, 2], min_length=1, description="Weights of 1, 2, 3 required searches (paper 4:3:2).")
    min_rubrics: int = Field(3, ge=1, description="Fewest rubrics per task (paper 3).")
    max_rubrics: int = Field(5, ge=1, description="Most rubrics per task (paper 5).")
    rubric_temperature: float = Field(0.0, ge=0, description="Judge temperature when writing rubrics (paper 0).")
    grading_temperature: float = Field(0.6, ge=0, description="Judge temperature when grading (paper 0.6).")
    challenger_format_weight: float = Field(0.5, description="R_C format weight (paper 0.5).")
    challenger_difficulty_weight: float = Field(1.0, description="R_C difficulty weight (paper 1.0).")
    difficulty_tau: float = Field(0.5, ge=0, le=1, description="f_diff target score tau (paper 0.5).")
    gate_failure: Literal["half_format", "format"] = Field(
        "half_format", description="R_C when a gate fails: 0.5*r_fmt (the paper's Eq. 4, lambda_fmt 0.5) or r_fmt "
        "(the paper's Algorithm 1, line 14).")
    solver_rubric_weight: float = Field(1.0, description="R_S rubric weight (paper 1.0).")
    solver_format_weight: float = Field(0.5, description="R_S format weight (paper 0.5).")
    solver_search_weight: float = Field(0.1, description="R_S search weight (paper 0.1).")
    search_reward_turns: int = Field(3, ge=1, description="Searches for the full search reward (paper 3).")
    length_soft: int = Field(1024, ge=1, description="Length penalty starts (tokens, paper 1024).")
    length_hard: int = Field(2048, ge=1, description="Length penalty reaches its floor (tokens, paper 2048).")
    length_floor: float = Field(0.05, ge=0, le=1, description="Length penalty floor (paper 0.05).")
    max_turns: int = Field(4, ge=1, description="Most tool turns per Solver trajectory (ours).")
    top_k: int = Field(3, ge=1, description="Passages per search (paper 3).")
    max_tool_tokens: int = Field(500, ge=16, description="Tool response budget in tokens (paper 500).")
    max_document_tokens: int = Field(1024, ge=32, description="Source documents are cut to this many tokens (ours).")
    candidate_rounds: int = Field(
        2, ge=1, description="Solver stage: Challenger batches of solver_prompts_per_step documents tried per "
        "solver_prompts_per_step tasks the pool needs (ours: a bound, the paper keeps generating until the pool is full).")
    gate_max_new_tokens: int = Field(
        8192, ge=8, description="Judge tokens per quality gate (the paper gives none; ours: its rubric budget, as "
        "the gate also reasons in <think> before its score).")
    rubric_max_new_tokens: int = Field(8192, ge=8, description="Judge tokens per rubric list (paper 8,192).")
    grade_max_new_tokens: int = Field(16384, ge=8, description="Judge tokens per rubric grade (paper 16,384).")
    judge_max_new_tokens: int | None = Field(
        None, ge=8, description="A cap on the three judge budgets above (None = no cap; a CPU demo caps them).")

    def pool_size(self) -> int:
        """Tasks the Solver stage starts with (solver_tasks, else one per Solver prompt of the stage)."""
        return self.solver_tasks or self.solver_steps * self.solver_prompts_per_step

    def judge_budgets(self) -> dict[str, int]:
        """The Judge's token budget per operation, the cap applied."""
        cap = self.judge_max_new_tokens or max(self.gate_max_new_tokens, self.rubric_max_new_tokens,
                                               self.grade_max_new_tokens)
        return {"gate": min(self.gate_max_new_tokens, cap), "rubrics": min(self.rubric_max_new_tokens, cap),
                "grade": min(self.grade_max_new_tokens, cap)}

    panel_metrics: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("schedule", "iteration", "iteration"), ("schedule", "stage", "stage (1 Challenger, 2 Solver)"),
        ("challenger", "task_parsed", "parsed"), ("challenger", "gate_entity", "gate: entity"),
        ("challenger", "gate_relevance", "gate: relevance"), ("challenger", "gate_pass_rate", "gates passed"),
        ("challenger", "rubrics_per_task", "rubrics / task"),
        ("challenger", "mean_rubric_score", "mean rubric score"), ("challenger", "in_window", "in window"),
        ("solver", "pool_size", "pool"), ("solver", "tasks", "solver tasks"),
        ("solver", "rubric_score", "solver rubric score"), ("challenger", "zero_variance_groups", "C dead groups"),
        ("solver", "zero_variance_groups", "S dead groups"), ("challenger", "truncated_rate", "C cut"),
        ("solver", "truncated_rate", "S cut"), ("judge", "truncated_rate", "judge cut"),
        ("challenger", "searches_refused", "C searches refused"), ("solver", "searches_refused", "S searches refused"))


class ScoreSection(MethodSection):
    """SCORE: a Solver writes research reports, an Evaluator samples rubrics and scores them."""

    display_name: ClassVar[str] = "SCORE"
    multi_update: ClassVar[bool] = True  # Solver then Evaluator on one rollout
    has_harness: ClassVar[bool] = True

    shared_defaults: ClassVar[dict[str, object]] = {
        "train.lr": 1e-6, "train.warmup_steps": 5, "rollout.group_size": 8, "train.kl_coef": 0.05,
        "train.kl_estimator": "k3", "train.prompts_per_step": 64, "train.steps": 120,
        "rollout.max_new_tokens": 4096,
    }
    max_tool_calls: int = Field(10, ge=1, description="Most assistant turns per report (paper 10).")
    mini_batch_size: int = Field(
        32, ge=1, description="PPO mini-batch in queries: the Solver's update takes batch / this optimizer steps "
        "(paper 32 of 64).")
    top_k: int = Field(3, ge=1, description="Passages per search.")
    harness_every: int = Field(5, ge=1, description="Meta-harness refresh period in steps (paper M=5).")
    meta_harness: Literal["rules", "endpoint", "human"] = Field(
        "rules", description="Who rewrites the evaluator harness (ours: rule-based default, an endpoint, or a person).")
    harness_endpoint: str | None = Field(None, description="Base URL of an OpenAI-compatible meta-harness.")
    dimension_pool: list[str] = Field(
        ["factuality", "insight", "coherence", "complexity", "comprehensiveness", "citation", "readability"],
        min_length=1, description="Dimensions the evaluator may choose from (ours).")
    dimensions: int = Field(4, ge=1, description="Dimensions per rubric, k (ours; the harness may change it).")
    must_include: list[str] = Field(["factuality"], description="Mandatory dimension(s) (ours).")
    weight_min: float = Field(0.1, ge=0, description="Smallest dimension weight (ours).")
    weight_max: float = Field(0.5, ge=0, description="Largest dimension weight (ours).")
    score_scale: float = Field(10.0, gt=0, description="Scores are 0..score_scale per dimension (ours: 0-10).")
    min_verification_searches: int = Field(
        1, ge=0, description="Initial harness minimum evaluator searches (at most evaluator_max_turns - 1).")
    baseline_decay: float = Field(0.7, ge=0, le=1, description="Evaluator EMA baseline: b <- decay*b + (1-decay)*R.")
    evaluator_temperature: float = Field(0.8, ge=0, description="Evaluator sampling temperature (paper 0.8).")
    evaluator_max_new_tokens: int = Field(
        2048, ge=8, description="Evaluator tokens per turn (the paper: 'evaluator maximum generation length 2048', "
        "unit unstated; per turn is ours). Tool output does not count against it.")
    evaluator_max_turns: int = Field(
        4, ge=1, description="Most evaluator turns (searches + final scores) per report (ours).")
    evaluator_max_total_tokens: int | None = Field(
        None, ge=64, description="Evaluator tokens per trajectory, its turns and tool output together (ours). None = "
        "every turn's budget plus every allowed search's tool output: evaluator_max_turns x evaluator_max_new_tokens "
        "+ (evaluator_max_turns - 1) x (max_tool_tokens + 16), so the harness's most required searches always fit.")
    must_include_weight: float | None = Field(
        None, ge=0, description="Weight of the mandatory dimension(s); None = weight_max (ours: the paper gives none).")
    max_tool_tokens: int = Field(500, ge=16, description="Tool response budget in tokens.")
    grounding: Literal["off", "share"] = Field(
        "off", description="A grounding term in the Solver's reward (ours; the paper has none): 'share' multiplies "
        "R_s by the share of the report's sentences that the passages its own searches retrieved support "
        "(trainer.rewards.grounded_share: their names and numbers in the passages); the whole R_s, its +1 for a "
        "well-formed report included, so a report with no supported sentence earns what an invalid one does. Logged "
        "as grounded_share (mean over valid reports) either way.")
    grounding_min_overlap: float = Field(
        0.7, gt=0, le=1, description="A sentence is supported when at least this share of its content words, and "
        "every number in it, occur in the report's retrieved passages (ours).")
    entropy_floor: float | None = Field(
        None, description="Stop early when the solver's mean entropy falls below this (None = never).")
    entropy_collapse_ratio: float | None = Field(
        0.25, ge=0, le=1, description="Stop early when solver entropy falls below this fraction of its first-step "
        "value for entropy_patience steps in a row (ours; the paper stops on entropy collapse). None = never.")
    entropy_patience: int = Field(2, ge=1, description="Consecutive collapsed steps before stopping (ours).")
    queries_path: str | None = file_field(
        None, description="JSONL of research queries ({'query'}); None = generate queries from the corpus (ours).")
    query_fallback: Literal["title", "skip"] = Field(
        "title", description="A document whose generated query does not parse: a templated query from its title "
        "(title) or no query (skip) (ours).")
    max_document_tokens: int = Field(512, ge=32, description="Documents shown to the query writer (tokens, ours).")
    query_max_new_tokens: int = Field(
        128, ge=8, description="Token budget of one generated training query (ours: the paper uses Reddit queries; "
        "one question fits in 128).")
    harness_model: str | None = Field(None, description="Model name sent to the meta-harness endpoint.")
    harness_api_key: str | None = key_ref_field("meta-harness")

    _endpoint, _key_ref = endpoint_checks("harness_endpoint", "harness_api_key")

    def evaluator_searches(self) -> int:
        """Searches the evaluator may make: its last turn writes the scores (evaluator_max_turns - 1)."""
        return self.evaluator_max_turns - 1

    def evaluator_trajectory_tokens(self) -> int:
        """The evaluator's whole-trajectory budget: ``evaluator_max_total_tokens``, or every turn's budget
        plus the tool output of every allowed search (a search returns at most max_tool_tokens of passages
        plus ~10 tokens of <information> wrapping; 16 allowed). 4 turns of 2048, 3 searches of 500: 9,740."""
        if self.evaluator_max_total_tokens is not None:
            return self.evaluator_max_total_tokens
        return self.evaluator_max_turns * self.evaluator_max_new_tokens + self.evaluator_searches() * (
            self.max_tool_tokens + 16)

    @model_validator(mode="after")
    def _searches_fit(self) -> "ScoreSection":
        if self.min_verification_searches > self.evaluator_searches():
            raise ValueError(f"min_verification_searches {self.min_verification_searches} exceeds the evaluator's "
                             f"{self.evaluator_searches()} allowed searches (evaluator_max_turns - 1): the depth rule "
                             "would zero every score; lower it or raise evaluator_max_turns")
        need = self.evaluator_searches() * (self.max_tool_tokens + 16) + self.evaluator_max_new_tokens
        if self.evaluator_max_total_tokens is not None and self.evaluator_max_total_tokens < need:
            raise ValueError(f"evaluator_max_total_tokens {self.evaluator_max_total_tokens} cannot hold the "
                             f"{self.evaluator_searches()} allowed searches' tool output (max_tool_tokens + 16 each) "
                             f"plus one turn of evaluator_max_new_tokens for the scores: {need}; raise it to at least "
                             f"{need}, leave it unset, or lower evaluator_max_turns")
        return self

    panel_metrics: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("solver", "harness_version", "harness v"), ("solver", "solver_reward", "solver reward"),
        ("solver", "consistency", "consistency"), ("evaluator", "rubric_followed", "rubric followed"),
        ("solver", "evaluator_searches", "evaluator searches"), ("solver", "depth_zeroed_rate", "depth zeroed"),
        ("solver", "eval_format_failures", "eval format fails"), ("solver", "valid_report_rate", "valid reports"),
        ("solver", "evaluator_truncated_rate", "evaluations cut"), ("evaluator", "rubric_repaired", "rubric repaired"),
        ("solver", "zero_variance_groups", "dead groups"), ("solver", "truncated_rate", "reports cut"),
        ("solver", "searches_refused", "searches refused"), ("solver", "depth_zeroed_of_valid", "valid zeroed"),
        ("solver", "grounded_share", "grounded"))


class PiplaySection(MethodSection):
    """pi-Play: an Examiner builds multi-hop questions; a Student learns with GRPO minus self-distillation."""

    schedule_fields: ClassVar[tuple[str, str, str]] = ("iterations", "examiner_steps", "student_steps")
    display_name: ClassVar[str] = "pi-Play"
    writes_tasks: ClassVar[bool] = True

    shared_defaults: ClassVar[dict[str, object]] = {
        "train.lr": 1e-6, "rollout.group_size": 5, "train.kl_coef": 0.0, "train.prompts_per_step": 256,
        "train.weight_decay": 0.01, "train.warmup_steps": 2, "train.grad_clip": 1.0,
        "rollout.max_new_tokens": 4096, "model.policies": "separate", "model.lora.r": 64,  # two policies (paper)
    }  # train.steps: iterations x (examiner_steps + student_steps) = 3 x 100 = 300 (schedule_steps)
    roles: ClassVar[tuple[str, ...]] = ("examiner", "student")
    answer_role: ClassVar[str | None] = "student"
    iterations: int = Field(
        3, ge=1, description="Examiner/Student alternations (paper 3): train.steps defaults to iterations x "
        "(examiner_steps + student_steps); a train.steps you set yourself may end the schedule early or repeat it.")
    examiner_steps: int = Field(50, ge=1, description="Examiner steps per iteration (paper 50).")
    student_steps: int = Field(50, ge=1, description="Student steps per iteration (paper 50).")
    hop_weights: list[float] = Field([4, 3, 2, 1], min_length=1, description="Weights of 1..4-hop questions (paper 4:3:2:1).")
    student_attempts: int = Field(5, ge=1, description="Student attempts scoring each examiner question (paper n=5).")
    student_draw_rounds: int = Field(
        4, ge=1, description="Student stage: examiner batches of train.prompts_per_step passages drawn at most per step "
        "to reach train.prompts_per_step valid questions (the paper's Student batch is 256 questions; the bound is ours).")
    format_weight: float = Field(0.5, description="Examiner reward R = r_d + format_weight * r_fmt (paper 0.5).")
    invalid_reward: Literal["gate", "paper"] = Field(
        "gate", description="Examiner reward of an invalid question. gate (ours): the task gate's penalties, "
        "gate.format_penalty (-1) when no question and answer parse, gate.rule_penalty (-0.5) when a gate rule refused "
        "it. paper: r_d = 0, so R = format_weight * r_fmt, as much as a valid question no Student attempt solved.")
    teacher_ema: float = Field(0.95, ge=0, le=1, description="Teacher EMA: theta_T <- ema*theta_T + (1-ema)*theta_S.")
    distill_lambdas: list[float] = Field(
        [0.03, 0.003, 0.002], min_length=1, description="Self-distillation weight per iteration (paper, Qwen3-4B/8B).")
    distill_top_k: int = Field(50, ge=1, description="Student top-K tokens in L_SD, plus one tail bucket (paper 50).")
    divergence: Literal["reverse_kl", "forward_kl", "js"] = Field(
        "reverse_kl", description="L_SD divergence (ours: reverse KL student||teacher by default).")
    max_turns: int = Field(5, ge=1, description="Most tool turns per trajectory (paper 5).")
    top_k: int = Field(3, ge=1, description="Passages per search.")
    max_tool_tokens: int = Field(500, ge=16, description="Tool response budget in tokens.")
    max_document_tokens: int = Field(256, ge=32, description="Source passages are cut to this many tokens (Dr.Zero 256).")
    examiner_max_new_tokens: int | None = Field(
        None, ge=16, description="Token budget of an examiner trajectory, tool output included (None = "
        "rollout.max_new_tokens, 4096; the paper caps the whole sequence, prompt included, at 4096).")
    student_max_new_tokens: int | None = Field(
        None, ge=16, description="Token budget of a student trajectory, tool output included (None = "
        "rollout.max_new_tokens, 4096; the paper caps the whole sequence, prompt included, at 8192).")

    def search_budgets(self) -> dict[str, int]:
        return {f"piplay.{k}": v for k in ("examiner_max_new_tokens", "student_max_new_tokens")
                if (v := getattr(self, k)) is not None}

    panel_metrics: ClassVar[tuple[tuple[str, str, str], ...]] = (
        ("schedule", "iteration", "iteration"), ("schedule", "stage", "stage (1 examiner, 2 student)"),
        ("examiner", "valid_rate", "valid questions"), ("examiner", "student_pass_rate", "student pass rate"),
        ("examiner", "reward_mean", "examiner reward"), ("examiner", "format_reward", "format reward"),
        ("examiner", "hops_1", "1-hop"), ("examiner", "hops_2", "2-hop"), ("examiner", "hops_3", "3-hop"),
        ("examiner", "hops_4", "4-hop"), ("examiner", "valid_hops_1", "valid 1-hop"),
        ("examiner", "valid_hops_2", "valid 2-hop"), ("examiner", "valid_hops_3", "valid 3-hop"),
        ("examiner", "valid_hops_4", "valid 4-hop"), ("student", "exact_match", "student exact match"),
        ("student", "distill", "divergence to teacher"), ("student", "lambda", "lambda"),
        ("student", "questions", "student questions"), ("student", "passages_drawn", "passages drawn"),
        ("student", "zero_variance_groups", "dead groups"), ("student", "truncated_rate", "student cut"),
        ("examiner", "truncated_rate", "examiner cut"), ("student", "searches_refused", "student searches refused"),
        ("examiner", "searches_refused", "examiner searches refused"))


SECTIONS: dict[str, type[MethodSection]] = {
    "grpo": GrpoSection,
    "spice": SpiceSection,
    "ssp": SspSection,
    "scope": ScopeSection,
    "score": ScoreSection,
    "piplay": PiplaySection,
}
