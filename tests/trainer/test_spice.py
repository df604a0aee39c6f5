"""SPICE: strict task parsing, ratio-preserving Challenger subsampling, and the recipe wiring."""
import math
import random

import pytest
import torch

from trainer.algos import get_advantage
from trainer.config import load_config
from trainer.methods.review import ReviewState
from trainer.methods.spice import build_samples, challenger_reward, select
from trainer.methods.spice_tasks import Attempt, continue_chat, is_correct
from trainer.methods.spice_tasks import (
    FormatChoice,
    SpiceTask,
    TaskError,
    format_prompt,
    keep_preserving_ratio,
    parse_format_choice,
    parse_task,
    reasoner_prompt,
    task_prompt,
)
from trainer.config import GateConfig
from trainer.method_configs import SpiceSection
from trainer.rewards import spice_reward_fn

# The paper's Challenger reward: one penalty (-0.1) for any invalid task, the raw pass rate, no template penalty.
PAPER = SpiceSection(invalid_penalty=-0.1)
NO_GATE = GateConfig(chance_correct=False, template_penalty=False)
from trainer.rollout.types import Completion
from trainer.sink import Verdict

FORMATS = ["mcq", "free_form"]
TYPES = ["integer", "float", "expression", "string", "boolean"]
MCQ = FormatChoice("mcq", None)


# ---- turn one: the format choice --------------------------------------------------------------

def test_format_choice_reads_the_last_json_after_thinking():
    text = ('Let me think: the document has numbers. {"draft": 1}\n'
            '{"suitable_for_mcq": false, "suitable_for_free_form": true, "best_answer_type": "Integer", '
            '"reason": "counts"}')
    assert parse_format_choice(text, FORMATS, TYPES) == FormatChoice("free_form", "integer")


def test_format_choice_mcq_ignores_answer_type():
    text = '{"suitable_for_mcq": true, "suitable_for_free_form": false, "best_answer_type": null, "reason": "x"}'
    assert parse_format_choice(text, FORMATS, TYPES) == MCQ


@pytest.mark.parametrize("text, reason", [
    ("I choose MCQ.", "no parsable JSON"),
    ('{"suitable_for_mcq": true, "suitable_for_free_form": true}', "exactly one"),
    ('{"suitable_for_mcq": "yes", "suitable_for_free_form": false}', "true or false"),
    ('{"suitable_for_mcq": false, "suitable_for_free_form": true, "best_answer_type": "Essay"}', "best_answer_type"),
    ('{"suitable_for_mcq": true, "suitable_for_free_form": false', "no parsable JSON"),  # unclosed
    ('{"format": "mcq"}', "lacks"),
])
def test_format_choice_is_strict(text, reason):
    with pytest.raises(TaskError, match=reason):
        parse_format_choice(text, FORMATS, TYPES)


def test_format_choice_refuses_a_format_the_run_disallows():
    text = '{"suitable_for_mcq": true, "suitable_for_free_form": false}'
    with pytest.raises(TaskError, match="not allowed"):
        parse_format_choice(text, ["free_form"], TYPES)


# ---- turn two: the task -----------------------------------------------------------------------

def test_mcq_task_parses_with_inline_options():
    text = ('thinking...\n{"hardening_process": "h", "multiple_choice_question": "Which moon? A) Io B) Europa '
            'C) Titan D) Triton", "multiple_choice_correct": "c)", "question_difficulty": "Hard"}')
    assert parse_task(text, MCQ) == SpiceTask("mcq", "mcq", "Which moon? A) Io B) Europa C) Titan D) Triton", "C")


@pytest.mark.parametrize("fields, reason", [
    ('"multiple_choice_question": "", "multiple_choice_correct": "A"', "empty"),
    ('"multiple_choice_question": "Q? A) 1 B) 2 C) 3 D) 4", "multiple_choice_correct": "E"', "A, B, C or D"),
    ('"multiple_choice_question": "Q? A) 1 B) 2", "multiple_choice_correct": "A"', "options"),
    ('"multiple_choice_question": "Q? A) 1 B) 2 C) 3 D) 4"', "lacks"),
])
def test_mcq_task_is_strict(fields, reason):
    with pytest.raises(TaskError, match=reason):
        parse_task("{" + fields + "}", MCQ)


QUESTION = "How many moons of Saturn were known by 1900?"


@pytest.mark.parametrize("kind, answer, gold", [
    ("integer", "42", "42"), ("integer", '"1,200"', "1200"), ("integer", "7.0", "7"),
    ("float", "3.14", "3.14"), ("expression", '"2*x + 5"', "2*x + 5"),
    ("string", '"gradient descent"', "gradient descent"), ("boolean", "true", "true"), ("boolean", '"False"', "false"),
])
def test_free_form_answers_of_each_type(kind, answer, gold):
    text = f'{{"question": "{QUESTION}", "answer": {answer}, "answer_type": "{kind.capitalize()}"}}'
    task = parse_task(text, FormatChoice("free_form", kind))
    assert (task.format, task.answer_type, task.question, task.answer) == ("free_form", kind, QUESTION, gold)


@pytest.mark.parametrize("kind, answer, reason", [
    ("integer", '"about 40"', "integer answer expected"),
    ("integer", "[42]", "plain value"),
    ("integer", '{"value": 42}', "plain value"),
    ("float", '"pi"', "float answer expected"),
    ("boolean", '"yes"', "true or false"),
    ("string", '"a very long answer string"', "more than 3 words"),
    ("string", '""', "empty answer"),
])
def test_free_form_answers_are_checked_against_their_type(kind, answer, reason):
    text = f'{{"question": "Q?", "answer": {answer}}}'
    with pytest.raises(TaskError, match=reason):
        parse_task(text, FormatChoice("free_form", kind))


def test_free_form_refuses_a_list_of_questions_and_a_type_mismatch():
    with pytest.raises(TaskError, match="one string"):
        parse_task('{"question": ["Q1", "Q2"], "answer": 1}', FormatChoice("free_form", "integer"))
    with pytest.raises(TaskError, match="differs"):
        parse_task('{"question": "Q?", "answer": 1, "answer_type": "String"}', FormatChoice("free_form", "integer"))


def test_garbage_from_a_random_model_is_an_invalid_task_not_a_crash():
    rng = random.Random(0)
    alphabet = '{}[]":,abc 01\\\n'
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for choice in (MCQ, FormatChoice("free_form", "integer")):
            try:
                parse_task(text, choice)
            except TaskError:
                pass
        try:
            parse_format_choice(text, FORMATS, TYPES)
        except TaskError:
            pass


def test_prompts_carry_their_inputs():
    assert "DOC-TEXT" in format_prompt("DOC-TEXT", FORMATS, TYPES)
    assert "Only multiple choice" in format_prompt("d", ["mcq"], TYPES)
    assert "type: Integer" in task_prompt(FormatChoice("free_form", "integer"))
    assert "multiple_choice_correct" in task_prompt(MCQ)
    assert reasoner_prompt(SpiceTask("free_form", "integer", "How many?", "4")).endswith("within \\boxed{}.")
    assert "letter of the correct option" in reasoner_prompt(SpiceTask("mcq", "mcq", "Q", "A"))


# ---- keeping G of N Challenger attempts -------------------------------------------------------

@pytest.mark.parametrize("n_valid, n, group, want_valid", [
    (6, 16, 8, 3),   # 8 * 6/16 = 3
    (1, 16, 8, 1),   # 8 * 1/16 = 0.5 -> at least one valid survives
    (0, 16, 8, 0),
    (15, 16, 8, 8),  # 8 * 15/16 = 7.5 -> 8 valid, 0 invalid
    (10, 12, 8, 7),  # 8 * 10/12 = 6.67 -> 7 valid, 1 invalid
    (12, 12, 8, 8),
])
def test_keep_preserving_ratio(n_valid, n, group, want_valid):
    valid = [True] * n_valid + [False] * (n - n_valid)
    random.Random(1).shuffle(valid)
    kept = keep_preserving_ratio(valid, group, random.Random(2))
    assert len(kept) == group and len(set(kept)) == group
    assert sum(valid[i] for i in kept) == want_valid


def test_keep_preserving_ratio_keeps_everything_when_attempts_are_few():
    assert keep_preserving_ratio([True, False, True], 8, random.Random(0)) == [0, 1, 2]


# ---- recipe wiring: grading, rewards, groups ---------------------------------------------------

SEC = load_config({"method": "spice"}).spice


def _completion(text, prompt=(1, 2, 3)):
    return Completion(prompt_ids=list(prompt), completion_ids=[5, 6], logprobs=[-0.1, -0.2], text=text,
                      finish_reason="eos")


def _graded(task, texts, key="1:d:0", group=0):
    a = Attempt("d", "Doc", 0, key, [1, 2, 3], completion_ids=[7, 8], loss_mask=[1, 1], logprobs=[-1.0, -1.0],
                task=task, kept=True, group=group)
    a.answers = [_completion(t) for t in texts]
    a.correct = [is_correct(task, t) for t in texts]
    return a


def test_challenger_reward_of_a_crafted_pass_pattern_equals_the_formula():
    task = SpiceTask("mcq", "mcq", "Q? A) 1 B) 2 C) 3 D) 4", "B")
    texts = ["so \\boxed{B}"] * 3 + ["\\boxed{A}"] * 4 + ["the answer is B (never boxed)"]
    a = _graded(task, texts)
    assert a.correct == [True] * 3 + [False] * 5
    # p = 3/8: p(1-p) = 15/64; (15/64 - 16/64)^2 = 1/4096; exp(-(1/4096) / 0.02) = exp(-0.01220703125) = 0.98787
    assert challenger_reward(a, spice_reward_fn("gaussian"), PAPER, NO_GATE) == pytest.approx(math.exp(-(1 / 4096) / 0.02))
    assert challenger_reward(a, spice_reward_fn("gaussian"), PAPER, NO_GATE) == pytest.approx(0.9879, abs=1e-4)
    assert challenger_reward(a, spice_reward_fn("threshold"), PAPER, NO_GATE) == 1.0
    assert challenger_reward(a, spice_reward_fn("absolute_zero"), PAPER, NO_GATE) == pytest.approx(5 / 8)
    invalid = Attempt("d", "Doc", 1, "1:d:1", [1], reason="task: no parsable JSON", kept=True)
    assert challenger_reward(invalid, spice_reward_fn("gaussian"), PAPER, NO_GATE) == pytest.approx(-0.1)


def test_the_gated_challenger_reward_corrects_for_chance_and_charges_format_failures_more():
    """The defaults: an MCQ's pass rate chance-corrected, a cluster's share taken off, -1 / -0.5 penalties."""
    sec, gate = SpiceSection(), GateConfig()
    mcq = _graded(SpiceTask("mcq", "mcq", "Q? A) 1 B) 2 C) 3 D) 4", "B"),
                  ["\\boxed{B}"] * 2 + ["\\boxed{A}"] * 6)  # p = 2/8, a blind guess's rate
    # chance-corrected: (1/4 - 1/4) / (3/4) = 0, so the gaussian gives exp(-(0 - 0.25)^2 / 0.02) = exp(-3.125)
    assert challenger_reward(mcq, spice_reward_fn("gaussian"), sec, gate) == pytest.approx(math.exp(-3.125))
    # the paper's raw p = 1/4: p(1-p) = 3/16, (3/16 - 4/16)^2 = 1/256, exp(-(1/256)/0.02) = 0.8226
    assert challenger_reward(mcq, spice_reward_fn("gaussian"), sec, NO_GATE) == pytest.approx(math.exp(-1 / 5.12))
    free = _graded(SpiceTask("free_form", "integer", "How many ships?", "4"), ["\\boxed{4}"] * 4 + ["\\boxed{5}"] * 4)
    free.cluster_share = 0.25  # its template is a quarter of the step's valid tasks: 1.0 - 0.25
    assert challenger_reward(free, spice_reward_fn("gaussian"), sec, gate) == pytest.approx(0.75)
    unparsed = Attempt("d", "Doc", 1, "1:d:1", [1], reason="task: no parsable JSON", kept=True)
    refused = Attempt("d", "Doc", 2, "1:d:2", [1], task=free.task, reason="task: question copies its document", kept=True)
    assert challenger_reward(unparsed, spice_reward_fn("gaussian"), sec, gate) == -1.0
    assert challenger_reward(refused, spice_reward_fn("gaussian"), sec, gate) == -0.5


def test_reasoner_grading_by_answer_type():
    integer = SpiceTask("free_form", "integer", "How many?", "1200")
    assert is_correct(integer, "... so \\boxed{1200}") and is_correct(integer, "\\boxed{1,200}")
    assert not is_correct(integer, "\\boxed{1201}") and not is_correct(integer, "1200")
    expr = SpiceTask("free_form", "expression", "f?", "2*x + 5")
    assert is_correct(expr, "\\boxed{5 + 2x}")
    string = SpiceTask("free_form", "string", "Who?", "Isaac Newton")
    assert is_correct(string, "\\boxed{isaac newton.}") and not is_correct(string, "\\boxed{Newton}")
    boolean = SpiceTask("free_form", "boolean", "Is it?", "true")
    assert is_correct(boolean, "\\boxed{True}") and not is_correct(boolean, "\\boxed{false}")


def test_a_flagged_question_is_invalid_and_never_a_reasoner_group():
    task = SpiceTask("mcq", "mcq", "Q? A) 1 B) 2 C) 3 D) 4", "B")
    review = ReviewState()
    review.remember("0:d:0", task.question)
    review.apply([Verdict("task", "0:d:0", "flag")])
    fresh = Attempt("d", "Doc", 0, "5:d:0", [1], task=task)  # the same question written again later
    select([[fresh]], SEC, review, random.Random(0))
    assert not fresh.valid and fresh.kept and "flagged" in fresh.reason
    assert challenger_reward(fresh, spice_reward_fn("gaussian"), PAPER, NO_GATE) == pytest.approx(-0.1)


def test_build_samples_makes_dr_grpo_groups_per_role():
    task = SpiceTask("free_form", "integer", "How many?", "4")
    good = _graded(task, ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}", "\\boxed{3}"])
    bad = Attempt("d", "Doc", 1, "1:d:1", [1, 2, 3], completion_ids=[9], loss_mask=[1], logprobs=[-0.5],
                  reason="format: no parsable JSON", kept=True)
    reward_fn = spice_reward_fn("gaussian")
    for a in (good, bad):
        a.reward = challenger_reward(a, reward_fn, PAPER, NO_GATE)
    samples = build_samples([[good, bad]], SEC, get_advantage("dr_grpo"), random.Random(0))
    chal = [s for s in samples if s.role == "challenger"]
    reas = [s for s in samples if s.role == "reasoner"]
    # rewards [1.0 (p = 1/2), -0.1]: mean 0.45 -> advantages +0.55, -0.55
    assert [s.advantage for s in chal] == pytest.approx([0.55, -0.55])
    # correct [1, 0, 1, 0]: mean 0.5 -> +-0.5
    assert [s.advantage for s in reas] == pytest.approx([0.5, -0.5, 0.5, -0.5])
    assert good.trained_reasoner and all(s.loss_mask == [1, 1] for s in reas)


def test_continue_chat_closes_the_turn_and_opens_the_next(smollm2_tokenizer):
    tok = smollm2_tokenizer
    after_eos = tok.decode(continue_chat(tok, "Write the task.", ended_with_eos=True))
    assert after_eos == "\n<|im_start|>user\nWrite the task.<|im_end|>\n<|im_start|>assistant\n"
    cut_short = tok.decode(continue_chat(tok, "Write the task.", ended_with_eos=False))
    assert cut_short.startswith("<|im_end|>\n<|im_start|>user\n")


# ---- end to end on a tiny model -----------------------------------------------------------------

import json  # noqa: E402

from tests.trainer.taught import pair, teach  # noqa: E402
from trainer.methods.spice_tasks import challenger_prompt, prefill_ids  # noqa: E402
from trainer.methods.spice_tasks import REASONER_SYSTEM, TASK_PREFILL  # noqa: E402
from trainer.methods.gate import GUESS_PROMPT_SUFFIX, reader_prompt  # noqa: E402
from trainer.tools.corpus import document_text  # noqa: E402
from trainer.prompts import chat  # noqa: E402
from trainer.runner import run  # noqa: E402
from trainer.tools.corpus import Document, JsonlDocumentSource  # noqa: E402

DOCS = [Document("d1", "Solar System", "The Sun holds the planets. Jupiter is the largest planet, Mercury the "
                 "smallest. Saturn has bright rings and many moons."),
        Document("d2", "Castle Drogo", "Castle Drogo is a country house in Devon, built between 1911 and 1930 by "
                 "Edwin Lutyens for Julius Drewe, the founder of the Home and Colonial Stores.")]


def _rows(run_dir, name):
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


def _spice_config(tiny_config, model_dir, **spice):
    return tiny_config("spice", model={"name_or_path": str(model_dir), "lora": {"r": 0}},
                       rollout={"max_new_tokens": 48, "temperature": 1.0, "group_size": 3},
                       train={"steps": 3, "prompts_per_step": 2, "lr": 1e-4, "micro_batch_size": 8, "device": "cpu"},
                       spice={"challenger_attempts": 3, "challenger_group_size": 2, "max_document_tokens": 64,
                              "format_max_new_tokens": 24, **spice})


def test_spice_runs_three_steps_on_a_random_model_and_reports_every_task(tiny_config, tiny_model_dir, tmp_path):
    result = run(_spice_config(tiny_config, tiny_model_dir), documents=JsonlDocumentSource(DOCS),
                 run_dir=tmp_path / "run")
    assert result.steps == 3 and len(result.step_seconds) == 3
    samples = _rows(tmp_path / "run", "samples.jsonl")
    tasks = [r for r in samples if r["kind"] == "task"]
    first = [t for t in tasks if t["data"]["round"] == 0]  # retries (when early stops left budget) come on top
    assert len(first) == 3 * 2 * 3 and len({t["key"] for t in tasks}) == len(tasks)  # steps x documents x attempts
    assert all(not t["valid"] and t["data"]["invalid_reason"] for t in tasks)  # garbage JSON -> invalid, no crash
    attempts = [r for r in samples if r["kind"] == "attempt" and r["role"] == "challenger"]
    assert len(attempts) == len(tasks) and all(len(a["token_ids"]) == len(a["loss_mask"]) for a in attempts)
    metrics = _rows(tmp_path / "run", "metrics.jsonl")
    chal = [m for m in metrics if m["role"] == "challenger"]
    assert [m["step"] for m in chal] == [1, 2, 3] and all(m["reward_mean"] == pytest.approx(-1.0) for m in chal)  # gate.format_penalty
    # where a step's generation went: the Challenger's rounds, the consensus reader, the Reasoner, the guess probe
    phases = ("challenger_seconds", "consensus_seconds", "reasoner_seconds", "guess_probe_seconds")
    for m in chal:
        assert all(m[k] >= 0 for k in phases) and sum(m[k] for k in phases) <= m["gen_seconds"]
        assert m["challenger_seconds"] > 0  # a random model's garbage still took its rounds


def test_spice_valid_path_with_a_model_taught_to_write_tasks(tiny_config, tiny_model_dir, tmp_path):
    """A tiny model taught one format choice, one MCQ, and a boxed answer right half of the time:
    tasks are valid, the Reasoner answers them, both roles train and the sink gets graded attempts.
    The Reasoner, the guess probe and the reader are taught the MCQ as the gate shows it, options shuffled."""
    from transformers import AutoTokenizer

    from trainer.methods.gate import question_key, shuffle_options

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    loaded = load_config(_spice_config(tiny_config, tiny_model_dir, think_before_task=False))
    sec = loaded.spice
    eos = [tok.eos_token_id]
    # both turns open with the recipe's prefill (prompt tokens): the model writes the rest of the JSON
    choice = tok.encode(' true, "suitable_for_free_form": false}', add_special_tokens=False) + eos
    written = "Which is largest? A) one B) two C) three D) four"
    mcq = tok.encode(f'{written}", "multiple_choice_correct": "D"}}', add_special_tokens=False) + eos
    # the gate's shuffle (gate.shuffle_options, on): the order spice_tasks.shuffle draws for this run and question
    shown, gold = shuffle_options(written, "D", random.Random(f"{loaded.seed}:{question_key(written)}"))
    assert (shown, gold) != (written, "D")  # this seed moves "four": the run below grades against the moved letter
    task = SpiceTask("mcq", "mcq", shown, gold)
    wrong = next(x for x in "ABCD" if x != gold)
    conversation = [(challenger_prompt(tok, DOCS[0], sec), False), (choice, True),
                    (continue_chat(tok, task_prompt(MCQ, sec.worked_example), True) + prefill_ids(tok, TASK_PREFILL["mcq"]), False),
                    (mcq, True)]  # both Challenger turns at once (think_before_task off: the turn opens with its JSON)
    asked = chat(tok, REASONER_SYSTEM, reasoner_prompt(task))
    answers = [pair(asked, tok.encode(f"So \\boxed{{{x}}}", add_special_tokens=False) + eos)
               for x in (gold, wrong)]  # 50/50
    # the task gate's model rules: the reader with the document agrees with the moved gold, the guess probe misses
    body = document_text(DOCS[0], tok, sec.max_document_tokens)
    read_ = chat(tok, REASONER_SYSTEM, reader_prompt(f"Title: {DOCS[0].title}\n\n{body}", reasoner_prompt(task)))
    reader = pair(read_, tok.encode(f"So \\boxed{{{gold}}}", add_special_tokens=False) + eos)
    guessed = pair(chat(tok, REASONER_SYSTEM, reasoner_prompt(task) + GUESS_PROMPT_SUFFIX),
                   tok.encode(f"\\boxed{{{wrong}}}", add_special_tokens=False) + eos)
    taught = teach(tiny_model_dir, tmp_path / "taught", [conversation, *answers, reader, guessed],
                   target_loss=0.05)  # 50/50 floor 0.018

    cfg = _spice_config(tiny_config, taught, think_before_task=False)
    cfg["gate"] = {"consensus_samples": 3, "consensus_max_new_tokens": 24, "guess_max_new_tokens": 8}
    cfg["rollout"]["temperature"] = 0.3
    result = run(cfg, documents=JsonlDocumentSource(DOCS[:1]), run_dir=tmp_path / "run")  # drawn twice a step
    assert result.steps == 3
    samples = _rows(tmp_path / "run", "samples.jsonl")
    valid = [r for r in samples if r["kind"] == "task" and r["valid"]]
    assert valid and all(t["format"] == "mcq" and t["answer"] == gold and t["question"] == shown
                         and t["data"]["written_answer"] == "D" for t in valid)
    graded = [t for t in valid if t["pass_rate"] is not None]
    assert graded and any(t["data"]["reasoner_group"] for t in graded)
    answers = [r for r in samples if r["kind"] == "attempt" and r["role"] == "reasoner"]
    assert answers and {a["task_key"] for a in answers} <= {t["key"] for t in graded}
    metrics = _rows(tmp_path / "run", "metrics.jsonl")
    reasoner_rows = [m for m in metrics if m["role"] == "reasoner"]
    assert any(m.get("skipped", 0) < m.get("samples", 0) for m in reasoner_rows)  # mixed answers -> gradients
    assert any(m["valid_rate"] > 0 for m in metrics if m["role"] == "challenger")
    chal = [m for m in metrics if m["role"] == "challenger"]
    assert any(m["consensus_rate"] > 0 for m in chal)  # the reader agreed: the task stayed valid
    assert all(m["guess_pass_rate"] < 0.5 for m in chal)  # the probe guessed a wrong letter: not guessable
    assert all(m["gate_guessable_rate"] == 0 and "optimizer_steps" in m for m in chal)
    assert any(m["mcq_letter_share_max"] == 1.0 for m in chal)  # as written, its right option is always D


def test_a_review_flag_reaches_the_recipe_and_survives_checkpoint_and_resume(tiny_config, tiny_model_dir, tmp_path):
    import torch

    from trainer.checkpoint import latest_checkpoint
    from trainer.sink import Control, NullSink

    class Reviewer(NullSink):
        """A reviewer who flags one task of step 1 at the first step boundary."""

        def __init__(self):
            self.sent = False

        def control(self):
            verdicts = [] if self.sent else [Verdict("task", "1:d1:0", "flag", reason="copied from the text")]
            self.sent = True
            return Control(verdicts=verdicts)

    cfg = _spice_config(tiny_config, tiny_model_dir)
    cfg["train"]["steps"] = 2
    run(cfg, sink=Reviewer(), documents=JsonlDocumentSource(DOCS[:1]), run_dir=tmp_path / "run")

    def flagged():
        state = torch.load(latest_checkpoint(tmp_path / "run") / "state.pt", weights_only=True)
        return state["recipe"]["review"]["flagged_keys"]

    assert flagged() == ["1:d1:0"]
    result = run(cfg, documents=JsonlDocumentSource(DOCS[:1]), run_dir=tmp_path / "run", resume=True,
                 overrides=["train.steps=3"])
    assert result.steps == 3 and flagged() == ["1:d1:0"]  # restored from the checkpoint, not sent again


def test_both_challenger_turns_open_with_their_json_prefill(smollm2_tokenizer):
    """The prefill is prompt (never trained) and is parsed with the reply, which must still finish the JSON."""
    from trainer.methods.spice_tasks import FORMAT_PREFILL

    tok = smollm2_tokenizer
    prompt = challenger_prompt(tok, DOCS[0], SEC)
    assert prompt[-len(prefill_ids(tok, FORMAT_PREFILL)):] == prefill_ids(tok, FORMAT_PREFILL)
    assert parse_format_choice(FORMAT_PREFILL + ' false, "suitable_for_free_form": true, "best_answer_type": "String"}',
                               FORMATS, TYPES) == FormatChoice("free_form", "string")
    with pytest.raises(TaskError, match="no parsable JSON"):  # an unfinished object stays invalid
        parse_format_choice(FORMAT_PREFILL + ' false, "suitable_for_free_form": true', FORMATS, TYPES)
    task = parse_task(TASK_PREFILL["free_form"] + 'Who designed Castle Drogo?", "answer": "Edwin Lutyens"}',
                      FormatChoice("free_form", "string"))
    assert task.question == "Who designed Castle Drogo?" and task.answer == "Edwin Lutyens"


def test_challenger_retries_in_rounds_until_the_cap_when_no_task_is_valid(tiny_config, tiny_model_dir, tmp_path):
    """A random model writes no valid task: each document gets every round up to the cap (paper: up to 1024
    attempts), the kept attempts come from all rounds, and the metrics say how many attempts were made and
    that both documents were dropped (no Reasoner group)."""
    cfg = _spice_config(tiny_config, tiny_model_dir, challenger_attempts=2, challenger_group_size=2,
                        max_challenger_attempts=6, challenger_token_budget=10**6)
    cfg["train"]["steps"] = 1
    run(cfg, documents=JsonlDocumentSource(DOCS), run_dir=tmp_path / "run")
    chal = [m for m in _rows(tmp_path / "run", "metrics.jsonl") if m["role"] == "challenger"][0]
    assert chal["attempts"] == 12 and chal["attempts_per_document"] == 6 and chal["retry_rounds"] == 3
    assert chal["documents_dropped"] == 2 and "attempts_per_valid_task" not in chal
    tasks = [r for r in _rows(tmp_path / "run", "samples.jsonl") if r["kind"] == "task"]
    assert len({t["key"] for t in tasks}) == len(tasks) and {t["data"]["round"] for t in tasks} >= {0}
    assert sum(t["data"]["kept"] for t in tasks) == 4  # 2 documents x challenger_group_size, from any round


def test_the_default_token_budget_keeps_a_cpu_step_to_one_round(tiny_config, tiny_model_dir, tmp_path):
    """Unset, the budget on a CPU allows no retry (a retry round there costs as long as the first), so the
    CPU demo's step keeps its one-round time; a budget given explicitly lets the rounds run."""
    cfg = _spice_config(tiny_config, tiny_model_dir, challenger_attempts=2, challenger_group_size=2)
    cfg["train"]["steps"] = 2
    run(cfg, documents=JsonlDocumentSource(DOCS), run_dir=tmp_path / "run")
    rows = [m for m in _rows(tmp_path / "run", "metrics.jsonl") if m["role"] == "challenger"]
    assert [(m["retry_rounds"], m["attempts"]) for m in rows] == [(1, 4), (1, 4)]
    assert all(m["budget_stop"] == 1.0 and m["documents_dropped"] == 2 for m in rows)  # a random model: never valid


def test_the_default_budget_is_one_rounds_worst_case_off_the_cpu_and_none_on_it():
    from trainer.methods.spice import token_budget

    sec = load_config({"method": "spice", "spice": {"challenger_attempts": 8}}).spice
    assert token_budget(sec, 300, "cuda") == 8 * 300 and token_budget(sec, 300, "cpu") == 0
    given = load_config({"method": "spice", "spice": {"challenger_token_budget": 5000}}).spice
    assert token_budget(given, 300, "cpu") == token_budget(given, 300, "cuda") == 5000


def test_a_retry_cap_below_one_round_is_a_config_error():
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match=r"max_challenger_attempts \(4\) must be at least challenger_attempts"):
        load_config({"method": "spice", "spice": {"challenger_attempts": 8, "max_challenger_attempts": 4}})


def test_spice_normalises_its_loss_by_dr_grpos_constant_the_generation_budget():
    """Dr.GRPO divides each sequence's token sum by the generation budget, not by its own length:
    two answers of 2 and 4 trained tokens at a per-token loss of 1 give (2 + 4) / (2 x 8192), where
    token-mean would give 6 / 6 = 1."""
    from trainer.algos import aggregate
    from trainer.config import load_config
    from trainer.update import Sample, _global_denominator

    cfg = load_config({"method": "spice"})
    assert (cfg.train.loss_agg, cfg.rollout.max_new_tokens) == ("seq_sum", 8192)
    samples = [Sample([1], [2, 3], [1, 1], [0.0, 0.0], 1.0), Sample([1], [2, 3, 4, 5], [1] * 4, [0.0] * 4, 1.0)]
    denom = _global_denominator(samples, cfg.train.loss_agg, cfg.rollout.max_new_tokens)
    assert denom == 2 * 8192
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    loss = aggregate(torch.ones(2, 4), mask, cfg.train.loss_agg, max_len=cfg.rollout.max_new_tokens)
    assert float(loss) == pytest.approx(6 / (2 * 8192))


def test_each_spice_role_has_its_own_token_budget():
    from types import SimpleNamespace

    from trainer.config import load_config
    from trainer.methods.spice_tasks import role_budget

    sec = load_config({"method": "spice"}).spice
    assert (sec.format_max_new_tokens, sec.task_max_new_tokens, sec.reasoner_max_new_tokens) == (256, None, None)
    ctx = SimpleNamespace(config=SimpleNamespace(rollout=SimpleNamespace(max_new_tokens=8192)))
    assert role_budget(ctx, sec.reasoner_max_new_tokens) == 8192 and role_budget(ctx, 512) == 512
