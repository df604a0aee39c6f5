"""The non-generation work of a SPICE (and GRPO) step made cheaper without changing its results (issue 22, item 5;
benchmarks/spice_step_cpu.py measures it): the boxed-answer parser, the batched and cached
math-verify checks, the Reasoner's grading and the Challenger's turn-two glue.

The verdict tables below were first copied from the code before that change and then reviewed row by row against
each gold answer (issue 35): where the old grader was wrong (\boxed{1.25} for gold 12.5) the row now says what the
gold calls for, with the reason in a comment. Batched and one-by-one grading must both give those verdicts."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainer.verify as verify
from trainer.methods.spice_tasks import SpiceTask, grade, is_correct
from trainer.verify import extract_boxed, math_equal, math_equal_many


def old_extract_boxed(text):
    """extract_boxed before the change: a map of every brace pair of the whole text, each call."""
    if not isinstance(text, str):
        return None
    matches = list(verify._BOXED.finditer(text))
    if not matches:
        return None
    pairs, stack = {}, []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    for m in reversed(matches):
        close = pairs.get(m.end() - 1)
        if close is not None:
            return text[m.end() : close].strip()
    return None


BOXY = st.lists(st.sampled_from(list("{}x1 \\$") + ["\\boxed{", "\\fbox {", "\\boxed {", "}}", "{{"]),
                max_size=60).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=st.one_of(BOXY, st.text()))
def test_extract_boxed_gives_what_it_gave_before(text):
    assert extract_boxed(text) == old_extract_boxed(text)


@pytest.mark.parametrize("text", [
    "\\boxed{a{b}c} then \\boxed{d", "\\boxed{x} \\boxed{y}}", "}\\boxed{1}{", "\\boxed{\\frac{1}{2}}",
    "\\boxed{a \\boxed{b} c", "\\fbox{A}", "\\boxed {  7 }", "no box", "\\boxed{", "{{{\\boxed{2}",
])
def test_extract_boxed_table(text):
    assert extract_boxed(text) == old_extract_boxed(text)


class CountedBraces:
    """verify._BRACE, counting the braces the parser visits; past ``limit`` it fails at once (a
    quadratic scan would otherwise run for minutes before the count was compared)."""

    def __init__(self, limit: int):
        self.visited, self.limit = 0, limit

    def finditer(self, text, pos, endpos):
        for m in BRACE.finditer(text, pos, endpos):
            self.visited += 1
            if self.visited > self.limit:
                raise AssertionError(f"the parser visited more than {self.limit} braces")
            yield m


BRACE = verify._BRACE


def test_extract_boxed_reads_a_long_answer_with_many_open_boxes_in_linear_time(monkeypatch):
    """Counted, not timed: each brace of the text is visited at most once, and a box at the end is
    read without walking the braces before it (the old parser mapped every brace pair of the text in
    Python, each call; scanning each open box to the end of the text would visit 20k x 40k braces)."""
    text = "\\boxed{1} " + "\\boxed{ {" * 20_000  # 20k boxes left open after the one that closes
    braces = text.count("{") + text.count("}")
    counted = CountedBraces(limit=braces)
    monkeypatch.setattr(verify, "_BRACE", counted)
    assert extract_boxed(text) == "1"
    assert 0 < counted.visited <= braces
    long = "step {x} " * 5000 + "\\boxed{42}"  # 10,002 braces, the last two the box's own
    counted = CountedBraces(limit=10**6)
    monkeypatch.setattr(verify, "_BRACE", counted)
    for _ in range(200):
        assert extract_boxed(long) == "42"
    assert counted.visited == 200 * 2


T = {
 "int": SpiceTask("free_form", "integer", "Q?", "1889"),
 "float": SpiceTask("free_form", "float", "Q?", "12.5"),
 "expr": SpiceTask("free_form", "expression", "Q?", "3*n^2 + 2*n"),
 "frac": SpiceTask("free_form", "expression", "Q?", "\\frac{1}{2}"),
 "str": SpiceTask("free_form", "string", "Q?", "Vienna"),
 "bool": SpiceTask("free_form", "boolean", "Q?", "true"),
 "mcq": SpiceTask("mcq", "mcq", "Q? A) a B) b C) c D) d", "B"),
}

VERDICTS = [  # (task, Reasoner text, correct against the task's gold answer; only a boxed answer is read)
    ('int', 'so the answer is $\\boxed{1889}$.', True),
    ('int', '\\boxed{1889}', True),
    ('int', '1889', False),
    ('int', 'so the answer is $\\boxed{1,889}$.', True),
    ('int', '\\boxed{1,889}', True),
    ('int', '1,889', False),
    ('int', 'so the answer is $\\boxed{1889.0}$.', True),
    ('int', '\\boxed{1889.0}', True),
    ('int', '1889.0', False),
    ('int', 'so the answer is $\\boxed{\\text{1889}}$.', True),
    ('int', '\\boxed{\\text{1889}}', True),
    ('int', '\\text{1889}', False),
    ('int', 'so the answer is $\\boxed{1888}$.', False),
    ('int', '\\boxed{1888}', False),
    ('int', '1888', False),
    ('int', 'so the answer is $\\boxed{eighteen}$.', False),
    ('int', '\\boxed{eighteen}', False),
    ('int', 'eighteen', False),
    ('int', 'so the answer is $\\boxed{18890}$.', False),
    ('int', '\\boxed{18890}', False),
    ('int', '18890', False),
    ('int', 'so the answer is $\\boxed{1889 years}$.', True),
    ('int', '\\boxed{1889 years}', True),
    ('int', '1889 years', False),
    ('int', 'so the answer is $\\boxed{\\frac{3778}{2}}$.', True),
    ('int', '\\boxed{\\frac{3778}{2}}', True),
    ('int', '\\frac{3778}{2}', False),
    ('int', 'so the answer is $\\boxed{1889+0}$.', True),
    ('int', '\\boxed{1889+0}', True),
    ('int', '1889+0', False),
    ('int', 'so the answer is $\\boxed{x}$.', False),
    ('int', '\\boxed{x}', False),
    ('int', 'x', False),
    ('int', '\\boxed{-1889}', False),  # the sign counts: -1889 != 1889
    ('int', '\\boxed{188.9}', False),  # the decimal point counts: 188.9 != 1889
    ('int', '\\boxed{18/89}', False),  # a fraction is a fraction: 18/89 ~ 0.2 != 1889
    ('int', '\\boxed{1,88,9}', False),  # not thousands groups, and not 1889 to math-verify either
    ('float', 'so the answer is $\\boxed{12.5}$.', True),
    ('float', '\\boxed{12.5}', True),
    ('float', '12.5', False),
    ('float', 'so the answer is $\\boxed{12.50}$.', True),
    ('float', '\\boxed{12.50}', True),
    ('float', '12.50', False),
    ('float', 'so the answer is $\\boxed{12.5\\%}$.', True),
    ('float', '\\boxed{12.5\\%}', True),
    ('float', '12.5\\%', False),
    ('float', 'so the answer is $\\boxed{\\frac{25}{2}}$.', True),
    ('float', '\\boxed{\\frac{25}{2}}', True),
    ('float', '\\frac{25}{2}', False),
    ('float', 'so the answer is $\\boxed{25/2}$.', True),
    ('float', '\\boxed{25/2}', True),
    ('float', '25/2', False),
    ('float', 'so the answer is $\\boxed{12.4}$.', False),
    ('float', '\\boxed{12.4}', False),
    ('float', '12.4', False),
    ('float', 'so the answer is $\\boxed{1.25}$.', False),  # was True: 1.25 != 12.5 (the old text shortcut
    ('float', '\\boxed{1.25}', False),  # dropped the decimal point: "125" == "125")
    ('float', '1.25', False),
    ('float', 'so the answer is $\\boxed{0.125}$.', False),
    ('float', '\\boxed{0.125}', False),
    ('float', '0.125', False),
    ('float', 'so the answer is $\\boxed{12}$.', False),
    ('float', '\\boxed{12}', False),
    ('float', '12', False),
    ('float', 'so the answer is $\\boxed{12.5 percent}$.', True),
    ('float', '\\boxed{12.5 percent}', True),
    ('float', '12.5 percent', False),
    ('float', '\\boxed{-12.5}', False),  # -12.5 != 12.5
    ('float', '\\boxed{125}', False),  # 125 != 12.5
    ('float', '\\boxed{0.125\\%}', False),  # 0.125% is 0.125 or 0.00125, neither 12.5
    ('expr', 'so the answer is $\\boxed{3n^2+2n}$.', True),
    ('expr', '\\boxed{3n^2+2n}', True),
    ('expr', '3n^2+2n', False),
    ('expr', 'so the answer is $\\boxed{n(3n+2)}$.', True),
    ('expr', '\\boxed{n(3n+2)}', True),
    ('expr', 'n(3n+2)', False),
    ('expr', 'so the answer is $\\boxed{2n + 3n^2}$.', True),
    ('expr', '\\boxed{2n + 3n^2}', True),
    ('expr', '2n + 3n^2', False),
    ('expr', 'so the answer is $\\boxed{3 n^{2} + 2 n}$.', True),
    ('expr', '\\boxed{3 n^{2} + 2 n}', True),
    ('expr', '3 n^{2} + 2 n', False),
    ('expr', 'so the answer is $\\boxed{3n^2}$.', False),
    ('expr', '\\boxed{3n^2}', False),
    ('expr', '3n^2', False),
    ('expr', 'so the answer is $\\boxed{n^2+2n}$.', False),
    ('expr', '\\boxed{n^2+2n}', False),
    ('expr', 'n^2+2n', False),
    ('expr', 'so the answer is $\\boxed{6n}$.', False),
    ('expr', '\\boxed{6n}', False),
    ('expr', '6n', False),
    ('expr', 'so the answer is $\\boxed{3*n**2+2*n}$.', True),  # was False: the gold in Python's power notation
    ('expr', '\\boxed{3*n**2+2*n}', True),  # (3*n**2 = 3n^2); math-verify now reads ** as ^
    ('expr', '3*n**2+2*n', False),
    ('expr', 'so the answer is $\\boxed{3n^2+2n+0}$.', True),
    ('expr', '\\boxed{3n^2+2n+0}', True),
    ('expr', '3n^2+2n+0', False),
    ('expr', 'so the answer is $\\boxed{\\frac{6n^2+4n}{2}}$.', True),
    ('expr', '\\boxed{\\frac{6n^2+4n}{2}}', True),
    ('expr', '\\frac{6n^2+4n}{2}', False),
    ('frac', 'so the answer is $\\boxed{0.5}$.', True),
    ('frac', '\\boxed{0.5}', True),
    ('frac', '0.5', False),
    ('frac', 'so the answer is $\\boxed{1/2}$.', True),
    ('frac', '\\boxed{1/2}', True),
    ('frac', '1/2', False),
    ('frac', 'so the answer is $\\boxed{\\frac12}$.', True),
    ('frac', '\\boxed{\\frac12}', True),
    ('frac', '\\frac12', False),
    ('frac', 'so the answer is $\\boxed{\\dfrac{1}{2}}$.', True),
    ('frac', '\\boxed{\\dfrac{1}{2}}', True),
    ('frac', '\\dfrac{1}{2}', False),
    ('frac', 'so the answer is $\\boxed{2^{-1}}$.', True),
    ('frac', '\\boxed{2^{-1}}', True),
    ('frac', '2^{-1}', False),
    ('frac', 'so the answer is $\\boxed{0.25}$.', False),
    ('frac', '\\boxed{0.25}', False),
    ('frac', '0.25', False),
    ('frac', 'so the answer is $\\boxed{\\frac{2}{4}}$.', True),
    ('frac', '\\boxed{\\frac{2}{4}}', True),
    ('frac', '\\frac{2}{4}', False),
    ('frac', 'so the answer is $\\boxed{half}$.', False),
    ('frac', '\\boxed{half}', False),
    ('frac', 'half', False),
    ('frac', '\\boxed{12}', False),  # 12 != 1/2 ("1/2" and "12" were equal once punctuation was dropped)
    ('frac', '\\boxed{-\\frac{1}{2}}', False),  # -1/2 != 1/2
    ('frac', '\\boxed{50\\%}', True),  # 50% of one is 1/2
    ('frac', '\\boxed{5\\%}', False),  # 5% is 5 or 0.05, neither 1/2
    ('str', 'so the answer is $\\boxed{Vienna}$.', True),
    ('str', '\\boxed{Vienna}', True),
    ('str', 'Vienna', False),
    ('str', 'so the answer is $\\boxed{vienna}$.', True),
    ('str', '\\boxed{vienna}', True),
    ('str', 'vienna', False),
    ('str', 'so the answer is $\\boxed{The Vienna}$.', True),
    ('str', '\\boxed{The Vienna}', True),
    ('str', 'The Vienna', False),
    ('str', 'so the answer is $\\boxed{VIENNA.}$.', True),
    ('str', '\\boxed{VIENNA.}', True),
    ('str', 'VIENNA.', False),
    ('str', 'so the answer is $\\boxed{Wien}$.', False),
    ('str', '\\boxed{Wien}', False),
    ('str', 'Wien', False),
    ('str', 'so the answer is $\\boxed{Vienna, Austria}$.', False),
    ('str', '\\boxed{Vienna, Austria}', False),
    ('str', 'Vienna, Austria', False),
    ('bool', 'so the answer is $\\boxed{true}$.', True),
    ('bool', '\\boxed{true}', True),
    ('bool', 'true', False),
    ('bool', 'so the answer is $\\boxed{True}$.', True),
    ('bool', '\\boxed{True}', True),
    ('bool', 'True', False),
    ('bool', 'so the answer is $\\boxed{TRUE}$.', True),
    ('bool', '\\boxed{TRUE}', True),
    ('bool', 'TRUE', False),
    ('bool', 'so the answer is $\\boxed{true.}$.', True),
    ('bool', '\\boxed{true.}', True),
    ('bool', 'true.', False),
    ('bool', 'so the answer is $\\boxed{false}$.', False),
    ('bool', '\\boxed{false}', False),
    ('bool', 'false', False),
    ('bool', 'so the answer is $\\boxed{yes}$.', False),
    ('bool', '\\boxed{yes}', False),
    ('bool', 'yes', False),
    ('mcq', 'so the answer is $\\boxed{B}$.', True),
    ('mcq', '\\boxed{B}', True),
    ('mcq', 'B', False),
    ('mcq', 'so the answer is $\\boxed{B)}$.', True),
    ('mcq', '\\boxed{B)}', True),
    ('mcq', 'B)', False),
    ('mcq', 'so the answer is $\\boxed{(B)}$.', True),
    ('mcq', '\\boxed{(B)}', True),
    ('mcq', '(B)', False),
    ('mcq', 'so the answer is $\\boxed{\\text{B}}$.', True),  # was False: \\text{B} is the letter B
    ('mcq', '\\boxed{\\text{B}}', True),
    ('mcq', '\\text{B}', False),
    ('mcq', 'so the answer is $\\boxed{A}$.', False),
    ('mcq', '\\boxed{A}', False),
    ('mcq', 'A', False),
    ('mcq', 'so the answer is $\\boxed{b}$.', True),
    ('mcq', '\\boxed{b}', True),
    ('mcq', 'b', False),
    ('mcq', 'so the answer is $\\boxed{option B}$.', True),
    ('mcq', '\\boxed{option B}', True),
    ('mcq', 'option B', False),
    ('mcq', 'so the answer is $\\boxed{C}$.', False),
    ('mcq', '\\boxed{C}', False),
    ('mcq', 'C', False),
]


def test_grading_gives_each_answer_the_verdict_its_gold_answer_calls_for():
    pairs = [(T[k], text) for k, text, _ in VERDICTS]
    want = [ok for _, _, ok in VERDICTS]
    assert grade(pairs) == want  # batched, as answer() grades a step
    assert [is_correct(task, text) for task, text in pairs] == want  # one by one


def test_math_checks_are_asked_once_per_distinct_answer_and_spread_over_helpers(monkeypatch):
    monkeypatch.setenv("SELFPLAY_MATH_WORKERS", "2")
    monkeypatch.setattr(verify, "_VERDICTS", {})
    asked = []
    real = verify._MathWorker.equal

    def counting(self, pred, gold, timeout):
        asked.append((id(self), pred, gold))
        return real(self, pred, gold, timeout)

    monkeypatch.setattr(verify._MathWorker, "equal", counting)
    pairs = [("n(3n+2)", "3*n^2 + 2*n"), ("6n", "3*n^2 + 2*n"), ("\\frac{50}{2^2}", "12.5"), ("12", "12.0")] * 4
    got = math_equal_many(pairs)
    assert got == [True, False, True, True] * 4
    assert sorted((p, g) for _, p, g in asked) == sorted(pairs[:3])  # 12 = 12.0 needs no sympy; repeats asked once
    assert math_equal_many([("\\frac{25}{2}", "12.5")]) == [True] and len(asked) == 3  # a plain fraction neither
    assert len({w for w, _, _ in asked}) == 2  # two helpers at once
    assert math_equal_many(pairs) == got and len(asked) == 3  # remembered verdicts
    assert math_equal("n(3n+2)", "3*n^2 + 2*n") and len(asked) == 3


def test_a_hung_check_is_false_and_not_remembered(monkeypatch):
    monkeypatch.setattr(verify, "_VERDICTS", {})
    slow = "+".join(f"x^{{{i}}}" for i in range(250))
    assert math_equal_many([(slow, "1"), ("2", "2.0")], timeout=0.001) == [False, True]
    assert (slow, "1") not in verify._VERDICTS


def test_a_bad_worker_count_is_a_warning_not_a_crash(monkeypatch):
    monkeypatch.setenv("SELFPLAY_MATH_WORKERS", "many")
    with pytest.warns(UserWarning, match="SELFPLAY_MATH_WORKERS"):
        assert verify.math_workers() >= 1


SCORES = [  # (text, gold, reward, GRPO's score_answer against the gold; reviewed row by row, issue 35)
    ('so the answer is \\boxed{18}', '18', 'math', 1.0),
    ('\\boxed{18.0}', '18', 'math', 1.0),
    ('#### 18', '18', 'math', 1.0),
    ('so 3 + 15 = 18 apples', '18', 'math', 1.0),
    ('no number here', '18', 'math', 0.0),
    ('\\boxed{\\frac{36}{2}}', '18', 'math', 1.0),
    ('<answer>1000</answer>', '18', 'math', 0.0),
    ('\\boxed{1000}', '18', 'math', 0.0),
    ('\\boxed{0.5}', '18', 'math', 0.0),
    ('\\boxed{1/2}', '18', 'math', 0.0),
    ('\\boxed{x^2 + 1}', '18', 'math', 0.0),
    ('\\boxed{(x+1)^2}', '18', 'math', 0.0),
    ('\\boxed{paris}', '18', 'math', 0.0),
    ('<answer> Paris </answer>', '18', 'math', 0.0),
    ('it is 72.', '18', 'math', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '18', 'math', 0.0),
    ('\\boxed{70+2}', '18', 'math', 0.0),
    ('\\boxed{', '18', 'math', 0.0),
    ('The total is $72$.', '18', 'math', 0.0),
    ('\\boxed{\\dfrac12}', '18', 'math', 0.0),
    ('so the answer is \\boxed{18}', '1,000', 'math', 0.0),
    ('\\boxed{18.0}', '1,000', 'math', 0.0),
    ('#### 18', '1,000', 'math', 0.0),
    ('so 3 + 15 = 18 apples', '1,000', 'math', 0.0),
    ('no number here', '1,000', 'math', 0.0),
    ('\\boxed{\\frac{36}{2}}', '1,000', 'math', 0.0),
    ('<answer>1000</answer>', '1,000', 'math', 1.0),
    ('\\boxed{1000}', '1,000', 'math', 1.0),
    ('\\boxed{0.5}', '1,000', 'math', 0.0),
    ('\\boxed{1/2}', '1,000', 'math', 0.0),
    ('\\boxed{x^2 + 1}', '1,000', 'math', 0.0),
    ('\\boxed{(x+1)^2}', '1,000', 'math', 0.0),
    ('\\boxed{paris}', '1,000', 'math', 0.0),
    ('<answer> Paris </answer>', '1,000', 'math', 0.0),
    ('it is 72.', '1,000', 'math', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '1,000', 'math', 0.0),
    ('\\boxed{70+2}', '1,000', 'math', 0.0),
    ('\\boxed{', '1,000', 'math', 0.0),
    ('The total is $72$.', '1,000', 'math', 0.0),
    ('\\boxed{\\dfrac12}', '1,000', 'math', 0.0),
    ('so the answer is \\boxed{18}', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{18.0}', '\\frac{1}{2}', 'math', 0.0),
    ('#### 18', '\\frac{1}{2}', 'math', 0.0),
    ('so 3 + 15 = 18 apples', '\\frac{1}{2}', 'math', 0.0),
    ('no number here', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{\\frac{36}{2}}', '\\frac{1}{2}', 'math', 0.0),
    ('<answer>1000</answer>', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{1000}', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{0.5}', '\\frac{1}{2}', 'math', 1.0),
    ('\\boxed{1/2}', '\\frac{1}{2}', 'math', 1.0),
    ('\\boxed{x^2 + 1}', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{(x+1)^2}', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{paris}', '\\frac{1}{2}', 'math', 0.0),
    ('<answer> Paris </answer>', '\\frac{1}{2}', 'math', 0.0),
    ('it is 72.', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{70+2}', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{', '\\frac{1}{2}', 'math', 0.0),
    ('The total is $72$.', '\\frac{1}{2}', 'math', 0.0),
    ('\\boxed{\\dfrac12}', '\\frac{1}{2}', 'math', 1.0),
    ('so the answer is \\boxed{18}', 'x^2+1', 'math', 0.0),
    ('\\boxed{18.0}', 'x^2+1', 'math', 0.0),
    ('#### 18', 'x^2+1', 'math', 0.0),
    ('so 3 + 15 = 18 apples', 'x^2+1', 'math', 0.0),
    ('no number here', 'x^2+1', 'math', 0.0),
    ('\\boxed{\\frac{36}{2}}', 'x^2+1', 'math', 0.0),
    ('<answer>1000</answer>', 'x^2+1', 'math', 0.0),
    ('\\boxed{1000}', 'x^2+1', 'math', 0.0),
    ('\\boxed{0.5}', 'x^2+1', 'math', 0.0),
    ('\\boxed{1/2}', 'x^2+1', 'math', 0.0),
    ('\\boxed{x^2 + 1}', 'x^2+1', 'math', 1.0),
    ('\\boxed{(x+1)^2}', 'x^2+1', 'math', 0.0),
    ('\\boxed{paris}', 'x^2+1', 'math', 0.0),
    ('<answer> Paris </answer>', 'x^2+1', 'math', 0.0),
    ('it is 72.', 'x^2+1', 'math', 0.0),
    ('\\boxed{72 \\text{ dollars}}', 'x^2+1', 'math', 0.0),
    ('\\boxed{70+2}', 'x^2+1', 'math', 0.0),
    ('\\boxed{', 'x^2+1', 'math', 0.0),
    ('The total is $72$.', 'x^2+1', 'math', 0.0),
    ('\\boxed{\\dfrac12}', 'x^2+1', 'math', 0.0),
    ('so the answer is \\boxed{18}', 'Paris', 'math', 0.0),
    ('\\boxed{18.0}', 'Paris', 'math', 0.0),
    ('#### 18', 'Paris', 'math', 0.0),
    ('so 3 + 15 = 18 apples', 'Paris', 'math', 0.0),
    ('no number here', 'Paris', 'math', 0.0),
    ('\\boxed{\\frac{36}{2}}', 'Paris', 'math', 0.0),
    ('<answer>1000</answer>', 'Paris', 'math', 0.0),
    ('\\boxed{1000}', 'Paris', 'math', 0.0),
    ('\\boxed{0.5}', 'Paris', 'math', 0.0),
    ('\\boxed{1/2}', 'Paris', 'math', 0.0),
    ('\\boxed{x^2 + 1}', 'Paris', 'math', 0.0),
    ('\\boxed{(x+1)^2}', 'Paris', 'math', 0.0),
    ('\\boxed{paris}', 'Paris', 'math', 1.0),
    ('<answer> Paris </answer>', 'Paris', 'math', 1.0),
    ('it is 72.', 'Paris', 'math', 0.0),
    ('\\boxed{72 \\text{ dollars}}', 'Paris', 'math', 0.0),
    ('\\boxed{70+2}', 'Paris', 'math', 0.0),
    ('\\boxed{', 'Paris', 'math', 0.0),
    ('The total is $72$.', 'Paris', 'math', 0.0),
    ('\\boxed{\\dfrac12}', 'Paris', 'math', 0.0),
    ('so the answer is \\boxed{18}', '72', 'math', 0.0),
    ('\\boxed{18.0}', '72', 'math', 0.0),
    ('#### 18', '72', 'math', 0.0),
    ('so 3 + 15 = 18 apples', '72', 'math', 0.0),
    ('no number here', '72', 'math', 0.0),
    ('\\boxed{\\frac{36}{2}}', '72', 'math', 0.0),
    ('<answer>1000</answer>', '72', 'math', 0.0),
    ('\\boxed{1000}', '72', 'math', 0.0),
    ('\\boxed{0.5}', '72', 'math', 0.0),
    ('\\boxed{1/2}', '72', 'math', 0.0),
    ('\\boxed{x^2 + 1}', '72', 'math', 0.0),
    ('\\boxed{(x+1)^2}', '72', 'math', 0.0),
    ('\\boxed{paris}', '72', 'math', 0.0),
    ('<answer> Paris </answer>', '72', 'math', 0.0),
    ('it is 72.', '72', 'math', 1.0),
    ('\\boxed{72 \\text{ dollars}}', '72', 'math', 1.0),
    ('\\boxed{70+2}', '72', 'math', 1.0),
    ('\\boxed{', '72', 'math', 0.0),
    ('The total is $72$.', '72', 'math', 1.0),
    ('\\boxed{\\dfrac12}', '72', 'math', 0.0),
    ('so the answer is -3.', '3', 'math', 0.0),  # the last number is -3, and -3 != 3
    ('so the answer is 1.5', '15', 'math', 0.0),  # 1.5 != 15
    ('so it is 18, I think', '18', 'math', 1.0),  # "18," is 18 (the comma ends the number)
    ('10-8 = 2 so 2', '-8', 'math', 0.0),  # the last number is 2; a minus after a digit subtracts
    ('\\boxed{-18}', '18', 'math', 0.0),  # -18 != 18
    ('\\boxed{1,8}', '18', 'math', 0.0),  # not a thousands group: not 18
    ('so the answer is \\boxed{18}', '18', 'exact', 1.0),
    ('\\boxed{18.0}', '18', 'exact', 1.0),  # was 0.0: exact reads numbers as numbers, 18.0 = 18
    ('#### 18', '18', 'exact', 1.0),
    ('so 3 + 15 = 18 apples', '18', 'exact', 0.0),
    ('no number here', '18', 'exact', 0.0),
    ('\\boxed{\\frac{36}{2}}', '18', 'exact', 0.0),
    ('<answer>1000</answer>', '18', 'exact', 0.0),
    ('\\boxed{1000}', '18', 'exact', 0.0),
    ('\\boxed{0.5}', '18', 'exact', 0.0),
    ('\\boxed{1/2}', '18', 'exact', 0.0),
    ('\\boxed{x^2 + 1}', '18', 'exact', 0.0),
    ('\\boxed{(x+1)^2}', '18', 'exact', 0.0),
    ('\\boxed{paris}', '18', 'exact', 0.0),
    ('<answer> Paris </answer>', '18', 'exact', 0.0),
    ('it is 72.', '18', 'exact', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '18', 'exact', 0.0),
    ('\\boxed{70+2}', '18', 'exact', 0.0),
    ('\\boxed{', '18', 'exact', 0.0),
    ('The total is $72$.', '18', 'exact', 0.0),
    ('\\boxed{\\dfrac12}', '18', 'exact', 0.0),
    ('so the answer is \\boxed{18}', '1,000', 'exact', 0.0),
    ('\\boxed{18.0}', '1,000', 'exact', 0.0),
    ('#### 18', '1,000', 'exact', 0.0),
    ('so 3 + 15 = 18 apples', '1,000', 'exact', 0.0),
    ('no number here', '1,000', 'exact', 0.0),
    ('\\boxed{\\frac{36}{2}}', '1,000', 'exact', 0.0),
    ('<answer>1000</answer>', '1,000', 'exact', 1.0),
    ('\\boxed{1000}', '1,000', 'exact', 1.0),
    ('\\boxed{0.5}', '1,000', 'exact', 0.0),
    ('\\boxed{1/2}', '1,000', 'exact', 0.0),
    ('\\boxed{x^2 + 1}', '1,000', 'exact', 0.0),
    ('\\boxed{(x+1)^2}', '1,000', 'exact', 0.0),
    ('\\boxed{paris}', '1,000', 'exact', 0.0),
    ('<answer> Paris </answer>', '1,000', 'exact', 0.0),
    ('it is 72.', '1,000', 'exact', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '1,000', 'exact', 0.0),
    ('\\boxed{70+2}', '1,000', 'exact', 0.0),
    ('\\boxed{', '1,000', 'exact', 0.0),
    ('The total is $72$.', '1,000', 'exact', 0.0),
    ('\\boxed{\\dfrac12}', '1,000', 'exact', 0.0),
    ('so the answer is \\boxed{18}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{18.0}', '\\frac{1}{2}', 'exact', 0.0),
    ('#### 18', '\\frac{1}{2}', 'exact', 0.0),
    ('so 3 + 15 = 18 apples', '\\frac{1}{2}', 'exact', 0.0),
    ('no number here', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{\\frac{36}{2}}', '\\frac{1}{2}', 'exact', 0.0),
    ('<answer>1000</answer>', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{1000}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{0.5}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{1/2}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{x^2 + 1}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{(x+1)^2}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{paris}', '\\frac{1}{2}', 'exact', 0.0),
    ('<answer> Paris </answer>', '\\frac{1}{2}', 'exact', 0.0),
    ('it is 72.', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{70+2}', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{', '\\frac{1}{2}', 'exact', 0.0),
    ('The total is $72$.', '\\frac{1}{2}', 'exact', 0.0),
    ('\\boxed{\\dfrac12}', '\\frac{1}{2}', 'exact', 0.0),
    ('so the answer is \\boxed{18}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{18.0}', 'x^2+1', 'exact', 0.0),
    ('#### 18', 'x^2+1', 'exact', 0.0),
    ('so 3 + 15 = 18 apples', 'x^2+1', 'exact', 0.0),
    ('no number here', 'x^2+1', 'exact', 0.0),
    ('\\boxed{\\frac{36}{2}}', 'x^2+1', 'exact', 0.0),
    ('<answer>1000</answer>', 'x^2+1', 'exact', 0.0),
    ('\\boxed{1000}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{0.5}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{1/2}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{x^2 + 1}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{(x+1)^2}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{paris}', 'x^2+1', 'exact', 0.0),
    ('<answer> Paris </answer>', 'x^2+1', 'exact', 0.0),
    ('it is 72.', 'x^2+1', 'exact', 0.0),
    ('\\boxed{72 \\text{ dollars}}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{70+2}', 'x^2+1', 'exact', 0.0),
    ('\\boxed{', 'x^2+1', 'exact', 0.0),
    ('The total is $72$.', 'x^2+1', 'exact', 0.0),
    ('\\boxed{\\dfrac12}', 'x^2+1', 'exact', 0.0),
    ('so the answer is \\boxed{18}', 'Paris', 'exact', 0.0),
    ('\\boxed{18.0}', 'Paris', 'exact', 0.0),
    ('#### 18', 'Paris', 'exact', 0.0),
    ('so 3 + 15 = 18 apples', 'Paris', 'exact', 0.0),
    ('no number here', 'Paris', 'exact', 0.0),
    ('\\boxed{\\frac{36}{2}}', 'Paris', 'exact', 0.0),
    ('<answer>1000</answer>', 'Paris', 'exact', 0.0),
    ('\\boxed{1000}', 'Paris', 'exact', 0.0),
    ('\\boxed{0.5}', 'Paris', 'exact', 0.0),
    ('\\boxed{1/2}', 'Paris', 'exact', 0.0),
    ('\\boxed{x^2 + 1}', 'Paris', 'exact', 0.0),
    ('\\boxed{(x+1)^2}', 'Paris', 'exact', 0.0),
    ('\\boxed{paris}', 'Paris', 'exact', 1.0),
    ('<answer> Paris </answer>', 'Paris', 'exact', 1.0),
    ('it is 72.', 'Paris', 'exact', 0.0),
    ('\\boxed{72 \\text{ dollars}}', 'Paris', 'exact', 0.0),
    ('\\boxed{70+2}', 'Paris', 'exact', 0.0),
    ('\\boxed{', 'Paris', 'exact', 0.0),
    ('The total is $72$.', 'Paris', 'exact', 0.0),
    ('\\boxed{\\dfrac12}', 'Paris', 'exact', 0.0),
    ('so the answer is \\boxed{18}', '72', 'exact', 0.0),
    ('\\boxed{18.0}', '72', 'exact', 0.0),
    ('#### 18', '72', 'exact', 0.0),
    ('so 3 + 15 = 18 apples', '72', 'exact', 0.0),
    ('no number here', '72', 'exact', 0.0),
    ('\\boxed{\\frac{36}{2}}', '72', 'exact', 0.0),
    ('<answer>1000</answer>', '72', 'exact', 0.0),
    ('\\boxed{1000}', '72', 'exact', 0.0),
    ('\\boxed{0.5}', '72', 'exact', 0.0),
    ('\\boxed{1/2}', '72', 'exact', 0.0),
    ('\\boxed{x^2 + 1}', '72', 'exact', 0.0),
    ('\\boxed{(x+1)^2}', '72', 'exact', 0.0),
    ('\\boxed{paris}', '72', 'exact', 0.0),
    ('<answer> Paris </answer>', '72', 'exact', 0.0),
    ('it is 72.', '72', 'exact', 0.0),
    ('\\boxed{72 \\text{ dollars}}', '72', 'exact', 0.0),
    ('\\boxed{70+2}', '72', 'exact', 0.0),
    ('\\boxed{', '72', 'exact', 0.0),
    ('The total is $72$.', '72', 'exact', 0.0),
    ('\\boxed{\\dfrac12}', '72', 'exact', 0.0),
]


def test_grpo_scores_each_answer_as_its_gold_answer_calls_for():
    from trainer.verify import score_answer, score_answers

    for reward in ("math", "exact"):
        rows = [r for r in SCORES if r[2] == reward]
        want = [r[3] for r in rows]
        assert score_answers([r[0] for r in rows], [r[1] for r in rows], reward) == want
        assert [score_answer(r[0], r[1], reward) for r in rows] == want
