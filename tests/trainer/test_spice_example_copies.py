"""A SPICE task that restates the Challenger prompt's worked example, reworded or not, is invalid (it is
not grounded in the document); with ``spice.worked_example`` off the example is not in the prompt at all.

COPIES are what SmolLM2-135M wrote on the H100 Learn run (RESULTS.md). QWEN_REWORDINGS are what
Qwen2.5-Coder-0.5B-Instruct wrote when asked to reword each example at temperature 1.0
(``benchmarks/spice_example_probe.py --paraphrases 4``), kept where they still carry the example's
content (dropped: the ones too vague to carry it, e.g. "How fast is the car traveling at?"), plus one
it wrote as a SPICE task; ISSUE_21 is the restatement it wrote in the issue's probe (gold 800, wrong).
QWEN_TASKS are its own valid tasks from the probe's documents: not grounded, mostly, but no copies.
"""
import pytest

from trainer.config import load_config
from trainer.methods.spice_tasks import (EXAMPLE_QUESTIONS, MCQ_EXAMPLE_QUESTION, FormatChoice, TaskError,
                                         copies_example, parse_task, task_prompt)

COPIES = [
    "A school has 12 classes of 25 pupils and 3 classes of 30 pupils; how many pupils do you have?",
    "A school has 12 classes of 25, and there are 2 classes of 30, considering that the school is 2 classes behind.",
    "How many pupils is it that the school has 12 classes of 25 to 30 of 1?",
    "Which river flows through both Vienna and Budapest? A) Danube B) Rhine C) Seine D) Po",
]
ISSUE_21 = "A school has 12 classes with 25 pupils each and 3 classes with 30 pupils each. How many pupils are there?"
QWEN_REWORDINGS = [
    "A school has 12 classes of 30 pupils and 0 classes of 25 pupils, how many pupils does it have?",
    "(A reduction) A school has 25 pupils and 30 pupils each, totaling 67 pupils.",
    "The car's average speed is approximately 3.97 km per minute, to two decimal places.",
    "What is the mean speed of the car in km per minute?",
    "What is the polynomial equation for the area of the rectangle whose width is \\(x\\) and length is \\(2x + 3\\) "
    "in terms of \\(x\\)?",
    "What area is rectangles represented by \\\\(\\frac{x^2}{2x+3}\\\\)?",
    "Choose where the 1900 and 1924 Summer Olympics were held together.",
    "Was the Eiffel Tower completed before the first Ethiopian Summer Olympics were held?",
    "Did the Eiffel Tower become a modern symbol of joy before the first Olympics were held?",
    "Was the Eiffel Tower constructed before the first Olympic Games were held?",
    "The river that flows through both Vienna and Budapest is the Elbe.",
    "How many students should exist in 3 classes in addition to 25 in the school?",  # a SPICE task of the probe
]
HAND_REWORDINGS = [  # the same move in other words: synonyms, spelled-out numbers, reordered facts
    "There are 12 classes that each have 25 students, plus 3 classes having 30 students. How many students in all?",
    "If twelve classes have twenty-five pupils each and three classes have thirty pupils each, how many pupils "
    "does the school have?",
    "What is the average speed in km per minute of a car that travels 150 km in 2 hours?",
    "What is the area of a rectangle with width x and length 2x+3, as a polynomial?",
    "In which city were the Summer Olympics of 1900 and 1924 held?",
    "Which river passes through Budapest and Vienna? A) Danube B) Elbe C) Rhine D) Vistula",
    "Which river runs through both Vienna and Budapest? A) Danube B) Seine C) Thames D) Po",
    # asks the example's question about Vienna with its answer (Danube): a restatement, not a task of its own
    "Which river flows through Vienna? A) Danube B) Rhine C) Seine D) Po",
]
GROUNDED = [
    "How many moons does Jupiter have according to the 2023 count?",
    "How many pupils does the school founded in 1821 have?",  # shares 2 of the Integer example's 7 items
    "Which city hosted the 2012 Summer Olympics?",  # the String example's words, none of its numbers
    "A train covers 300 km in 3 hours; what is its speed in km per hour?",
    "How many classes did the school have in 1990 when it had 25 teachers?",
    "The castle was built between 1911 and 1930; how many years did its construction take?",
    "How many different types of clothing are there?",  # the 0.5B's ungrounded task of issue 21: not a copy
]
QWEN_TASKS = [  # its valid tasks in the probe (benchmarks/RESULTS.md, "Worked example"), with and without the example
    "In the ancient Greek calendar, which month starts from January?",
    "The Downey Mountains were formed in AD?",
    "The total number of pencils is 200, and does not contain any letters, symbols, or spaces.",
    "How many 2015 certificates does an online library sell?",
    "The total number of flowers is 200, and the number of flowers in the first 5 pages is 150. How many flowers "
    "are in the last page?",
    "What is the duration of a flight that is 450 kilometers and has a duration of 3 hours, to three significant "
    "digits?",
    "In a jar, there are marbles, white, and green marbles. What is the number of marbles in the jar?",
    "Of the natural elements halogens, which are rare-earth elements found in various minerals, the symbol D- which "
    "has atomic number 179 is used to represent the oxidation state of a quinone, such as water?",
    "What is a fundamental musical instrument in the music genre of writing?",
    "How much money does it take a student to go shopping for 100 books?",
]


@pytest.mark.parametrize("question", COPIES + [ISSUE_21] + QWEN_REWORDINGS + HAND_REWORDINGS
                         + list(EXAMPLE_QUESTIONS.values()) + [MCQ_EXAMPLE_QUESTION])
def test_restatements_of_the_examples_are_caught(question):
    assert copies_example(question)


@pytest.mark.parametrize("question", GROUNDED + QWEN_TASKS)
def test_questions_of_their_own_pass(question):
    assert not copies_example(question)


def test_a_restated_task_is_invalid_with_a_reason():
    integer = FormatChoice("free_form", "integer")
    for question in (COPIES[0], ISSUE_21):
        text = '{"question": "%s", "answer": 800, "answer_type": "Integer"}' % question
        with pytest.raises(TaskError, match="copies the prompt's example"):
            parse_task(text, integer)
    own = '{"question": "%s", "answer": 95, "answer_type": "Integer"}' % GROUNDED[0]
    assert parse_task(own, integer).answer == "95"
    mcq = FormatChoice("mcq", None)
    with pytest.raises(TaskError, match="copies the prompt's example"):
        parse_task('{"multiple_choice_question": "%s", "multiple_choice_correct": "A"}' % HAND_REWORDINGS[5], mcq)


@pytest.mark.parametrize("choice", [FormatChoice("mcq", None), *(FormatChoice("free_form", t) for t in
                                                                   ("integer", "float", "expression", "string",
                                                                    "boolean"))])
def test_the_worked_example_is_in_the_prompt_only_when_asked(choice):
    example = MCQ_EXAMPLE_QUESTION.split("?")[0] if choice.format == "mcq" else \
        EXAMPLE_QUESTIONS[choice.answer_type.capitalize()]
    shown, bare = task_prompt(choice, worked_example=True), task_prompt(choice, worked_example=False)
    assert example in shown and "Example (for another document)" in shown
    assert example not in bare and "Example" not in bare and bare.endswith("}") and shown.startswith(bare)


def test_the_flag_is_a_spice_config_key():
    assert load_config({"method": "spice", "spice": {"worked_example": True}}).spice.worked_example is True
    assert load_config({"method": "spice", "spice": {"worked_example": False}}).spice.worked_example is False
