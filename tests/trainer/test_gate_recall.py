"""The gate's recall rule (``gate.recall``, off by default): a numeric task whose question gives no number to work
from is refused, and SPICE's Challenger is told so. Built from the tasks seed 2's last Challenger wrote on held-out
documents (examples/runs/spice-gate-wiki-qwen15-seed2: 52 of its 64 integer tasks ask to recall a number), and from
tasks it passes: a number given, a string or MCQ answer, a GSM8K word problem."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainer.config import GateConfig, load_config
from trainer.methods.gate import GateTask, RULES, asks_recall, gate_metrics, rule_of, task_failures
from trainer.methods.spice_tasks import FormatChoice, TaskError, parse_task, task_prompt

RUNS = Path(__file__).resolve().parents[2] / "examples" / "runs"
DOC = "Warsaw is the capital of Poland. The city is divided into 18 districts. The Battle of Vienna was fought in 1683."


def _late_tasks(run: str) -> list[dict]:
    rows = [json.loads(line) for line in (RUNS / run / "crossplay_tasks.jsonl").open()]
    return [r for r in rows if r["challenger"] != "base" and r["format"] == "free_form"]


def test_the_seed_2_challengers_number_recalls_are_caught():
    tasks = _late_tasks("spice-gate-wiki-qwen15-seed2")
    recalls = [t for t in tasks if asks_recall(t["question"], t["answer_type"])]
    assert len(tasks) == 64 and len(recalls) == 52
    caught = {t["question"] for t in recalls}
    assert {"How many people live in Timbuktu?", "In which year did the Battle of Vienna take place?",
            "How many districts does Warsaw have?", "How many million km² does Niger cover?"} <= caught
    # what it lets through gives a number (a date is a number too: the rule is a floor, not a proof of reasoning)
    assert "What is the population of Munich as of 30 November 2024?" not in caught


@pytest.mark.parametrize("question,answer_type", [
    ("How many districts does Warsaw have?", "integer"),
    ("What year was the Battle of Vienna fought?", "integer"),
    ("How long is the Zambezi in km?", "float"),
    ("How many million km² does Niger cover?", "integer"),  # "²" and a scale word give no number
    ("Which one of the districts is the largest, in square kilometres as a whole number?", "integer"),  # "one": no number
])
def test_a_numeric_question_without_a_number_asks_for_recall(question, answer_type):
    assert asks_recall(question, answer_type)
    failures = task_failures(GateTask(question, "18", DOC, answer_type=answer_type), recall=True,
                             require_grounding=False)
    assert [name for name, _ in failures] == ["recall"]
    assert rule_of("task: " + failures[0][1]) == "recall" and "recall" in RULES


def test_a_number_answer_typed_otherwise_and_numbers_of_any_script():
    # the Challenger could declare "expression" or "string" for a recalled number: the answer itself is read
    assert asks_recall("How many districts does Warsaw have?", "expression", "18")
    assert asks_recall("How many districts does Warsaw have?", "string", "1,000")
    assert not asks_recall("Which district of Warsaw is the largest?", "string", "Mokotow")
    assert asks_recall("How many districts does Warsaw have?", "string", "18") and \
        [n for n, _ in task_failures(GateTask("How many districts does Warsaw have?", "18", DOC, answer_type="string"),
                                     recall=True)] == ["recall"]
    assert not asks_recall("How many years after \u0661\u0668\u0663\u0663 did the war end?", "integer")  # Arabic-Indic
    assert asks_recall("How many dunes does the Ténéré hold?", "integer")  # "Ténéré" is one word, not "ten"


@pytest.mark.parametrize("question,answer_type", [
    ("How many years after the Russo-Turkish War of 1877-1878 did the Congress of Berlin meet in 1888?", "integer"),
    ("Warsaw has 18 districts of which half lie east of the river; how many lie east?", "integer"),
    ("Natalia sold clips to forty-eight of her friends in April, and then she sold half as many clips in May. "
     "How many clips did Natalia sell altogether in April and May?", "integer"),  # GSM8K's first test item
    ("A city of twelve districts adds three more each decade; how many does it have after two decades?", "integer"),
    ("Which city is the capital of Poland?", "string"),
    ("Was the Battle of Vienna fought before the Congress of Berlin?", "boolean"),
])
def test_a_question_that_gives_numbers_or_asks_no_number_passes(question, answer_type):
    answer = {"string": "Warsaw", "boolean": "true"}.get(answer_type, "6")
    assert not asks_recall(question, answer_type, answer)
    assert not [n for n, _ in task_failures(GateTask(question, answer, DOC, answer_type=answer_type), recall=True,
                                            require_grounding=False) if n == "recall"]


def test_the_rule_is_off_unless_asked_and_never_judges_an_mcq():
    task = GateTask("How many districts does Warsaw have?", "18", DOC, answer_type="integer")
    assert task_failures(task) == [] and GateConfig().recall is False
    # an MCQ is a choice among given options: never judged, even typed integer and with no number anywhere
    mcq = GateTask("Which district is the largest? A) Mokotow B) Wola C) Praga D) Ursus", "B", DOC, "mcq", "integer")
    assert task_failures(mcq, recall=True, require_grounding=False) == []
    assert gate_metrics(["task: " + task_failures(task, recall=True)[0][1], ""], ["18"], [0])["gate_recall_rate"] == 0.5


def test_spice_parses_with_the_rule_and_tells_its_challenger():
    text = '{"question": "How many districts does Warsaw have?", "answer": 18, "answer_type": "Integer"}'
    integer = FormatChoice("free_form", "integer")
    assert parse_task(text, integer, document=DOC).answer == "18"  # off: valid as before
    with pytest.raises(TaskError, match="asks for a number it gives nothing to work out from") as err:
        parse_task(text, integer, document=DOC, recall=True)
    assert err.value.task.question == "How many districts does Warsaw have?"  # the refused question stays on record
    told = task_prompt(integer, think=True, recall=True)
    assert "give in it the numbers the answer comes from" in told and told.endswith(task_prompt(integer, think=True)
                                                                                 .split("\n\n")[-1])
    assert "give in it" not in task_prompt(integer, think=True)  # off: the prompt as before
    for other in (FormatChoice("free_form", "string"), FormatChoice("mcq", None)):  # only numeric tasks are told
        assert task_prompt(other, recall=True) == task_prompt(other)


def test_the_config_key_and_the_gate_command(tmp_path, capsys):
    from trainer.__main__ import main

    assert load_config({"method": "spice", "gate": {"recall": True}}).gate.recall is True
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"question": "How many districts does Warsaw have?", "answer": "18",
                                 "answer_type": "integer", "document": DOC}) + "\n")
    assert main(["gate", str(tasks)]) == 0
    assert json.loads(capsys.readouterr().out)["valid"]
    assert main(["gate", str(tasks), "--set", "gate.recall=true"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["failed"] == ["recall"] and not verdict["valid"]
    # SSP's Solver searches, so its tasks are not held to it (recall_rule on the method's section)
    assert main(["gate", str(tasks), "--method", "ssp", "--set", "gate.recall=true"]) == 0
    assert "recall" not in json.loads(capsys.readouterr().out)["failed"]
    assert main(["gate", str(tasks), "--set", "gate.recall=sometimes"]) == 2
    assert "gate.recall" in capsys.readouterr().err


class _Script:
    """A Generator whose every conversation writes the same turns: a format choice, then a task (no model)."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.prompts = tokenizer, turns, []

    def generate(self, prompts, params, use_adapter=True, *, max_new_tokens=None):
        self.prompts.append([self.tokenizer.decode(p) for p in prompts])
        text = self.turns[len(self.prompts) - 1]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return [SimpleNamespace(completion_ids=ids, logprobs=[-1.0] * len(ids), text=text, finish_reason="eos")
                for _ in prompts]


@pytest.mark.parametrize("recall", [False, True])
def test_the_challengers_turns_carry_the_rule_into_training_and_cross_play(smollm2_tokenizer, recall):
    from trainer.evaluate import _spice_ctx, challenger_tasks, spice_section
    from trainer.methods.spice_tasks import challenge
    from trainer.rollout import SamplingParams
    from trainer.tools.corpus import Document

    turns = [' false, "suitable_for_free_form": true, "best_answer_type": "Integer", "reason": "numbers"}',
             'I pick the districts. {"question": "How many districts does Warsaw have?", "answer": 18, '
             '"answer_type": "Integer"}']
    docs = [Document("d1", "Warsaw", DOC)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=64)
    section = spice_section({"challenger_attempts": 2})
    # training: the recipe's context carries the run's gate section
    loaded = SimpleNamespace(tokenizer=smollm2_tokenizer, generator=_Script(smollm2_tokenizer, turns))
    ctx = _spice_ctx(loaded, section, sampling)
    ctx.config.gate, ctx.config.seed = GateConfig(recall=recall), 0
    attempts = challenge(ctx, docs, step=1)
    told = ["give in it the numbers" in p for p in loaded.generator.prompts[1]]
    assert told == [recall, recall]
    assert [a.valid for a in attempts] == [not recall] * 2
    if recall:
        assert all(a.reason.startswith("task: question asks for a number") for a in attempts)
    # cross-play: the run's gate.recall reaches the Challenger as in training
    loaded.generator = _Script(smollm2_tokenizer, turns)
    tasks, tried = challenger_tasks(loaded, docs, 1, sampling, section, max_rounds=1, recall=recall)
    assert ("give in it the numbers" in loaded.generator.prompts[1][0]) == recall
    assert (len(tasks), tried) == (0 if recall else 1, 1)
