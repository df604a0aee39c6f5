"""The task gate (trainer/methods/gate.py): each rule on collapsed tasks it would have caught, and on a healthy task
it passes; the random-reward control's coin; ``python -m trainer gate``.

The collapsed tasks are the GPU runs' own (examples/runs/*/crossplay_tasks.jsonl: each Challenger's 48-96 held-out
tasks, the base's and the last checkpoint's)."""
import json
import random
from pathlib import Path

import pytest

from trainer.config import GateConfig
from trainer.methods.gate import (MCQ_LETTERS, GateTask, chance_corrected, chance_level, check_task, cluster_shares,
                                  consensus, copy_ratio, gate_metrics, guessable, largest_share, option_spans, rule_of,
                                  shuffle_options, task_failures, template, template_clusters, template_penalty)
from trainer.methods.spice import control_flips, step_metrics
from trainer.methods.spice_tasks import Attempt, SpiceTask, shuffle
from trainer.rewards import coin_flips

RUNS = Path(__file__).resolve().parents[2] / "examples" / "runs"


def _tasks(run: str, challenger: str) -> list[dict]:
    rows = [json.loads(line) for line in (RUNS / run / "crossplay_tasks.jsonl").open()]
    return [r for r in rows if r["challenger"] == challenger]


def _largest_share(questions: list[str]) -> float:
    return max(cluster_shares(template_clusters(questions)))


# ---- template clusters ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("run,collapsed,at_least", [
    ("spice-wiki-qwen15-lr2e-6-rules2", "step 33", 0.95),  # "How many correct answers?" for 95 of 96 documents
    ("spice-wiki-qwen15-lr2e-6-rules3", "step 37", 0.25),  # "How many continents does Niger lie on?" family: 29/96
    ("spice-wiki-qwen15-lr2e-6", "step 15", 0.15),  # "How many types of ... are mentioned in the text?": 9/48
    ("spice-wiki-qwen05-lr2e-6", "step 35", 0.95),  # digit strings: one template, <n>
])
def test_template_clusters_find_each_collapsed_family_and_not_the_base_challengers(run, collapsed, at_least):
    assert _largest_share([r["question"] for r in _tasks(run, collapsed)]) >= at_least
    assert _largest_share([r["question"] for r in _tasks(run, "base")]) <= 0.125  # the same model before training


def test_gsm8k_word_problems_form_no_cluster():
    """A healthy Challenger over GSM8K solutions: every problem its own template (1 of 64 each)."""
    for who in ("base", "step 10"):
        assert _largest_share([r["question"] for r in _tasks("spice-gsm8kdocs-qwen15-lr2e-6", who)]) == 1 / 64


def test_templates_mask_names_and_numbers():
    assert template("How many continents does Niger lie on?") == template("How many continents does Chad lie on?")
    assert template("In 1453, how many ships did Venice send?") == ("in", "<n>", "how", "many", "ships", "did",
                                                                      "<e>", "send")
    a, b, c = template_clusters(["How many paragraphs are there in the given text?",
                                 "How many paragraphs are in the text?",
                                 "Which river flows through both Vienna and Budapest?"])
    assert a == b != c  # 6 of 12 bigrams shared: >= 0.5


def test_the_cluster_penalty_is_r_zeros():
    # R-Zero: r = max(0, r_uncertainty - |C| / B); 3 of 4 tasks in one cluster -> share 0.75
    shares = cluster_shares([7, 7, 2, 7])
    assert shares == [0.75, 0.75, 0.25, 0.75]
    assert template_penalty(1.0, 0.75) == 0.25 and template_penalty(0.5, 0.75) == 0.0
    assert template_penalty(0.9, 0.25) == pytest.approx(0.65)


# ---- per-task rules -------------------------------------------------------------------------------------------

DOC = ("Trier was founded by the Romans in 16 BC under Augustus. In the 4th century it was an imperial residence of "
       "the Western Roman Empire, on the Moselle.")


def test_a_question_that_copies_its_document_is_refused_and_a_rewritten_one_passes():
    copied = "In the 4th century, was it an imperial residence of the Western Roman Empire, on the Moselle?"
    healthy = "Which emperor's reign saw the founding of a Moselle city that later housed Western Roman emperors?"
    assert copy_ratio(copied, DOC) > 0.8 >= copy_ratio(healthy, DOC)
    assert check_task(GateTask(copied, "Augustus", DOC)).startswith("question copies its document")
    assert check_task(GateTask(healthy, "Augustus", DOC)) is None
    assert check_task(GateTask(copied, "Augustus", DOC), max_copy_ratio=1.0) is None  # 1 turns it off


def test_every_rule_a_task_breaks_is_listed():
    """The collapsed 1.5B run's first family: refers to the text, shares no word with its document."""
    failures = task_failures(GateTask("How many paragraphs are there in the given text?", "1", DOC))
    assert [name for name, _ in failures] == ["refers_to_document", "not_grounded"]
    assert rule_of("task: " + failures[0][1]) == "refers_to_document"
    # an answer stated in the question; for SSP's substring check as well
    assert [n for n, _ in task_failures(GateTask("Which emperor, Augustus, founded Trier?", "Augustus", DOC))] == [
        "answer_in_question"]
    # a boolean's true/false and an MCQ's letter are choices, never copies
    assert task_failures(GateTask("Was Trier founded under Augustus, true or false?", "true", DOC,
                                  answer_type="boolean")) == []


# ---- chance, the guess probe, the consensus reader ---------------------------------------------------------------

def test_chance_correction_takes_blind_guessing_out():
    assert chance_level("mcq", "mcq") == 0.25 and chance_level("free_form", "boolean") == 0.5
    assert chance_level("free_form", "integer") == 0.0
    # MCQ: (0.25 - 0.25) / 0.75 = 0; (0.625 - 0.25) / 0.75 = 0.5; (1 - 0.25) / 0.75 = 1
    assert [chance_corrected(p, 0.25) for p in (0.25, 0.625, 1.0)] == pytest.approx([0.0, 0.5, 1.0])
    # yes/no: (0.75 - 0.5) / 0.5 = 0.5; below chance floors at 0
    assert chance_corrected(0.75, 0.5) == pytest.approx(0.5) and chance_corrected(0.25, 0.5) == 0.0
    assert chance_corrected(0.3, 0.0) == 0.3  # free-form: unchanged


def test_the_guess_probe_refuses_what_needs_no_reasoning():
    # the collapsed run's "How many continents does Niger lie on? -> 1": guessed as often as reasoned
    assert guessable(guess_rate=6 / 8, full_rate=6 / 8)
    assert guessable(guess_rate=1.0, full_rate=7 / 8)
    # a healthy hard task: reasoning helps
    assert not guessable(guess_rate=1 / 8, full_rate=5 / 8)
    # an MCQ guessed at chance and reasoned at chance is hard, not guessable; a yes/no passed by a coin likewise
    assert not guessable(guess_rate=2 / 8, full_rate=2 / 8, chance=0.25)
    assert not guessable(guess_rate=4 / 8, full_rate=4 / 8, chance=0.5)
    assert guessable(guess_rate=7 / 8, full_rate=7 / 8, chance=0.5)  # above chance without reasoning: known
    assert not guessable(guess_rate=0.0, full_rate=0.0)  # neither passes: hard (the variance reward says so)


def test_consensus_needs_a_strict_majority():
    assert consensus([True, True, False]) and not consensus([True, False]) and not consensus([])
    assert not consensus([False, False, True])


def test_gate_metrics_name_every_rule():
    reasons = ["", "task: question copies its document (91% ...)", "task: task is guessable (guessed ...)",
               "format: no parsable JSON"]
    m = gate_metrics(reasons, ["1", "1", "2"], [0, 0, 1])
    assert m["gate_copy_ratio_rate"] == 0.25 and m["gate_guessable_rate"] == 0.25 and m["gate_consensus_rate"] == 0
    assert m["answer_share_max"] == pytest.approx(2 / 3) and m["template_cluster_max"] == pytest.approx(2 / 3)


def test_penalties_must_charge_a_format_failure_at_least_a_rule_failure():
    assert GateConfig().format_penalty == -1.0 and GateConfig().rule_penalty == -0.5
    with pytest.raises(ValueError, match="format_penalty"):
        GateConfig(format_penalty=-0.1, rule_penalty=-0.5)


# ---- MCQ option order ----------------------------------------------------------------------------------------

def _gold_text(question: str, letter: str) -> str:
    return option_spans(question)[1][MCQ_LETTERS.index(letter)][1]


def test_shuffled_options_spread_the_right_letter_of_a_challenger_that_always_wrote_a():
    # the seed-1 SPICE run's step-19 Challenger: 61 of its 63 held-out MCQs answered "A" as written
    tasks = [r for r in _tasks("spice-gate-wiki-qwen15-seed1", "step 19") if r["format"] == "mcq"]
    assert largest_share([r["answer"] for r in tasks]) > 0.95
    rng = random.Random(0)
    moved = [shuffle_options(r["question"], r["answer"], rng) for r in tasks]
    assert all(m is not None for m in moved)  # every one of them (also "Washington, D.C.?" with "A)" labels)
    assert largest_share([letter for _, letter in moved]) < 0.45 and {letter for _, letter in moved} == set("ABCD")
    for r, (question, letter) in zip(tasks, moved):
        stem, options, _ = option_spans(r["question"])
        stem2, options2, _ = option_spans(question)
        assert stem2 == stem and sorted(t for _, t in options2) == sorted(t for _, t in options)
        assert _gold_text(question, letter) == _gold_text(r["question"], r["answer"])  # the right option moved along


def test_the_shuffle_is_uniform_and_reproducible():
    q = "Which river flows through Vienna? A) Danube B) Rhine C) Elbe D) Vistula"
    letters = [shuffle_options(q, "A", random.Random(i))[1] for i in range(4000)]
    assert all(abs(letters.count(x) / 4000 - 0.25) < 0.03 for x in "ABCD")
    assert shuffle_options(q, "A", random.Random("7:1:d:0")) == shuffle_options(q, "A", random.Random("7:1:d:0"))


@pytest.mark.parametrize("question", [
    "Which river? (A) Danube (B) Rhine (C) Elbe (D) Vistula",
    "Which year did the Battle of Vienna take place?\nA. 1683\nB. 1682\nC. 1684\nD. 1685",
    "Which of A) and B) came first? A) x1 B) y2 C) z3 D) w4",  # labels named in the stem: the options follow the last A
])
def test_option_labels_of_each_style_keep_their_place(question):
    moved, letter = shuffle_options(question, "B", random.Random(3))
    stem, options, gaps = option_spans(question)
    stem2, options2, gaps2 = option_spans(moved)
    assert stem2 == stem and [lab for lab, _ in options2] == [lab for lab, _ in options] and gaps2 == gaps
    assert _gold_text(moved, letter) == options[1][1]


@pytest.mark.parametrize("question,gold,text", [
    ("Which class of fire involves energized electrical equipment? A) Class A: ordinary combustibles B) Class B: "
     "flammable liquids C) Class C: electrical equipment D) Class D: combustible metals", "C",
     "Class C: electrical equipment"),
    ("Which vitamin does sunlight help the skin make? A) Vitamin A. B) Vitamin B. C) Vitamin C. D) Vitamin D.", "D",
     "Vitamin D."),
    # doubled labels, as a 1.5B Challenger wrote them (3 of the 140 MCQs in the shipped runs' samples)
    ("Which of the following options correctly represents the number of chickens on Brown's farm? A) A) 10 cows and 5 "
     "chickens B) B) 15 cows and 5 chickens C) C) 14 cows and 6 chickens D) D) 13 cows and 7 chickens", "C",
     "14 cows and 6 chickens"),
])
def test_options_holding_label_like_text_are_split_at_their_own_labels(question, gold, text):
    for seed in range(8):
        moved, letter = shuffle_options(question, gold, random.Random(seed))
        assert [lab for lab, _ in option_spans(moved)[1]] == [lab for lab, _ in option_spans(question)[1]]
        assert _gold_text(moved, letter) == text


def test_an_mcq_whose_options_cannot_be_shuffled_is_refused():
    a = Attempt("d", "Doc", 0, "1:d:0", [1], task=SpiceTask("mcq", "mcq", "Which? A) one C) two B) three D) four", "A"))
    shuffle(a, seed=0)
    assert not a.valid and rule_of(a.reason) == "options" and a.written_letter == "A"
    assert gate_metrics([a.reason], [], [])["gate_options_rate"] == 1.0


def test_the_order_follows_the_question_as_mark_repeated_compares_it():
    base = "Which river flows through Vienna? A) Danube B) Rhine C) Elbe D) Vistula"
    variants = [base, base.replace("Vienna?", "Vienna ?"), base + ".", base.replace("Which", "which")]
    letters = set()
    for q in variants:
        a = Attempt("d", "Doc", 0, "1:d:0", [1], task=SpiceTask("mcq", "mcq", q, "A"))
        shuffle(a, seed=3)
        letters.add(a.task.answer)
    assert len(letters) == 1  # one key, one order: the written variants still read as one question


@pytest.mark.parametrize("question", [
    "Which is largest? A) one C) two B) three D) four",  # out of order
    "Which is largest? A) one B) two C) three",  # three options
    "Which is largest? A) one B) two C) three D) four E) five",  # five
    "Which is largest? A) one B) C) three D) four",  # an empty option
    "Which capital lies on the Potomac? A. Washington, D.C. B. Ottawa C. Canberra D. Brasilia",  # "D." inside A's text
])
def test_options_that_cannot_be_told_apart_stay_as_written(question):
    assert shuffle_options(question, "A", random.Random(0)) is None


def test_the_challengers_letter_is_kept_and_the_solvers_see_the_moved_one():
    task = SpiceTask("mcq", "mcq", "How many people live in Timbuktu? A) One million B) Two million C) Three million "
                     "D) Four million", "A")
    attempts = []
    for i in range(40):
        a = Attempt("d", "Doc", i, f"1:d:{i}", [1], task=task, kept=True)
        shuffle(a, seed=i)
        assert a.written_letter == "A" and _gold_text(a.task.question, a.task.answer) == "One million"
        attempts.append(a)
    assert len({a.task.answer for a in attempts}) == 4
    assert step_metrics(attempts)["challenger"]["mcq_letter_share_max"] == 1.0  # as written: always A
    assert largest_share([]) == 0.0


def test_one_question_written_for_two_documents_reads_the_same_and_is_still_repeated():
    """The shuffle is seeded by the run's seed and the question as written: the same MCQ written for two documents
    gets one order, so mark_repeated (and a reviewer's flag, matched by question text) still sees one question."""
    from trainer.methods.gate import mark_repeated

    task = SpiceTask("mcq", "mcq", "How many people live in Timbuktu? A) One million B) Two million C) Three million "
                     "D) Four million", "A")
    other = SpiceTask("mcq", "mcq", "Which river flows through Vienna? A) Danube B) Rhine C) Elbe D) Vistula", "A")
    attempts = [Attempt(doc, doc, 0, f"1:{doc}:0", [1], task=t) for doc, t in (("x", task), ("y", task), ("z", other))]
    for a in attempts:
        shuffle(a, seed=7)
    assert attempts[0].task == attempts[1].task != task  # moved, and moved alike
    assert mark_repeated(attempts) == 2 and attempts[2].valid
    a = Attempt("x", "x", 0, "2:x:0", [1], task=task)
    shuffle(a, seed=7)
    assert a.task == attempts[0].task  # a later step: the same text again (a reviewer's flag still matches)


# ---- the random-reward control -----------------------------------------------------------------------------------

def test_a_control_reward_is_a_fair_coin_whatever_the_answers():
    flips = coin_flips(20000, 0.5, random.Random(0))
    assert set(flips) == {0.0, 1.0}
    assert abs(sum(flips) / len(flips) - 0.5) < 0.015  # 4.2 standard errors (0.0035) from 0.5
    assert abs(sum(coin_flips(20000, 0.2, random.Random(1))) / 20000 - 0.2) < 0.015

    import numpy as np
    from types import SimpleNamespace

    def ctx(control):
        train = SimpleNamespace(control=control, control_p=0.5)
        return SimpleNamespace(config=SimpleNamespace(train=train), rng=np.random.default_rng(2))

    task = SpiceTask("free_form", "integer", "How many ships did Venice send in 1453?", "12")
    right = [Attempt("d", "D", i, str(i), [], task=task, answers=[None] * 8) for i in range(500)]
    wrong = [Attempt("d", "D", i, str(i), [], task=task, answers=[None] * 8) for i in range(500)]
    for a in right:
        a.correct, a.graded = [True] * 8, [True] * 8
    for a in wrong:
        a.correct, a.graded = [False] * 8, [False] * 8
    control_flips(ctx("random-reward"), right + wrong)
    for group in (right, wrong):  # the same coin for answers all right and answers all wrong
        rate = sum(sum(a.correct) for a in group) / (8 * len(group))
        assert abs(rate - 0.5) < 0.03
    assert all(a.graded == [True] * 8 for a in right)  # the grader's verdicts stay for the metrics and the gate

    untouched = [Attempt("d", "D", 0, "0", [], task=task, answers=[None] * 8)]
    untouched[0].correct = [False] * 8
    control_flips(ctx("none"), untouched)
    assert untouched[0].correct == [False] * 8


def test_every_recipes_control_hook_flips_coins_only_in_a_control():
    """``rewards.control_rewards``, which SCOPE's Solver, SCORE's report writer and pi-Play's Student use: the rewards
    untouched (and the run's RNG not drawn) without a control; fair coins whatever the rewards with one."""
    from types import SimpleNamespace

    import numpy as np

    from trainer.rewards import control_rewards

    def ctx(control):
        train = SimpleNamespace(control=control, control_p=0.5)
        return SimpleNamespace(config=SimpleNamespace(train=train), rng=np.random.default_rng(0))

    off = ctx("none")
    assert control_rewards(off, [0.9, 0.0, 1.2]) == [0.9, 0.0, 1.2]
    assert off.rng.integers(10**9) == np.random.default_rng(0).integers(10**9)  # nothing drawn
    on = ctx("random-reward")
    flips = [x for _ in range(200) for x in control_rewards(on, [1.0] * 50)]
    assert set(flips) == {0.0, 1.0} and abs(sum(flips) / len(flips) - 0.5) < 0.02  # 10,000 coins: sd 0.005


# ---- python -m trainer gate ----------------------------------------------------------------------------------------

def test_the_gate_command_screens_a_task_file(tmp_path, capsys):
    from trainer.__main__ import main

    tasks = tmp_path / "tasks.jsonl"
    rows = [{"question": q, "answer": "1", "document": f"{name} is a landlocked country in Africa.",
             "document_id": name} for q, name in [("How many continents does Niger lie on?", "Niger"),
                                                   ("How many continents does Chad lie on?", "Chad"),
                                                   ("How many continents does Mali lie on?", "Mali")]]
    rows.append({"question": "Which emperor founded a Moselle city that later housed Western Roman emperors?",
                 "answer": "Augustus", "document": DOC})
    tasks.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["gate", str(tasks)]) == 0
    captured = capsys.readouterr()
    verdicts = [json.loads(line) for line in captured.out.splitlines()]  # one line per task
    summary = json.loads(captured.err.strip().splitlines()[-1])["summary"]
    assert [v["valid"] for v in verdicts] == [False, False, False, True]
    assert all(v["failed"] == ["repeated_answer"] and v["cluster_share"] == 0.75 for v in verdicts[:3])
    assert summary == {"tasks": 4, "valid": 1, "failed_by_rule": {"repeated_answer": 3},
                       "largest_cluster_share": 0.75, "largest_answer_share": 0.75}

    # a "step" per line: the rules over a step's tasks see only its own lines
    for i, r in enumerate(rows):
        r["step"] = 1 if i < 2 else 2
    tasks.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["gate", str(tasks)]) == 0
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [v["valid"] for v in verdicts] == [True, True, True, True]  # "1" for 2 of 2 documents: under 3
    assert [v["cluster_share"] for v in verdicts] == [1.0, 1.0, 0.5, 0.5]

    # an MCQ whose options cannot be shuffled is refused, as in training (no model needed)
    mcq = tmp_path / "mcq.jsonl"
    mcq.write_text(json.dumps({"question": "Which river flows through Vienna? A) Danube C) Rhine B) Elbe D) Vistula",
                               "answer": "A", "document": "The Danube flows through Vienna."}) + "\n")
    assert main(["gate", str(mcq)]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["failed"] == ["options"] and not verdict["valid"]
    assert main(["gate", str(mcq), "--set", "gate.shuffle_options=false"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"]

    # a model that is not there: one error line, no traceback, nothing printed as a verdict
    assert main(["gate", str(mcq), "--model", "no-such-model"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: --model no-such-model:")
    assert "Traceback" not in captured.err

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok?", "answer": "1"}\n{not json\n')
    assert main(["gate", str(bad)]) == 2
    assert "bad.jsonl:2: not valid JSON" in capsys.readouterr().err
