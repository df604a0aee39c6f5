"""A SPICE task that copies the Challenger prompt's worked example is invalid (it is not grounded in
the document). The copies below are what SmolLM2-135M wrote on the H100 Learn run (RESULTS.md)."""
import pytest

from trainer.methods.spice_tasks import (EXAMPLE_QUESTIONS, MCQ_EXAMPLE_QUESTION, FormatChoice, TaskError,
                                         copies_example, parse_task)

COPIES = [
    "A school has 12 classes of 25 pupils and 3 classes of 30 pupils; how many pupils do you have?",
    "A school has 12 classes of 25, and there are 2 classes of 30, considering that the school is 2 classes behind.",
    "How many pupils is it that the school has 12 classes of 25 to 30 of 1?",
    "Which river flows through both Vienna and Budapest? A) Danube B) Rhine C) Seine D) Po",
]
GROUNDED = [
    "How many moons does Jupiter have according to the 2023 count?",
    "How many pupils does the school founded in 1821 have?",  # shares words, no run of 5 with the example
    "Which river flows through Vienna? A) Danube B) Rhine C) Seine D) Po",
]


@pytest.mark.parametrize("question", COPIES + list(EXAMPLE_QUESTIONS.values()) + [MCQ_EXAMPLE_QUESTION])
def test_copies_of_the_examples_are_caught(question):
    assert copies_example(question)


@pytest.mark.parametrize("question", GROUNDED)
def test_questions_of_their_own_pass(question):
    assert not copies_example(question)


def test_a_copied_task_is_invalid_with_a_reason():
    integer = FormatChoice("free_form", "integer")
    text = '{"question": "%s", "answer": 390, "answer_type": "Integer"}' % COPIES[0]
    with pytest.raises(TaskError, match="copies the prompt's example"):
        parse_task(text, integer)
    own = '{"question": "%s", "answer": 95, "answer_type": "Integer"}' % GROUNDED[0]
    assert parse_task(own, integer).answer == "95"
    mcq = FormatChoice("mcq", None)
    with pytest.raises(TaskError, match="copies the prompt's example"):
        parse_task('{"multiple_choice_question": "%s", "multiple_choice_correct": "A"}' % COPIES[3], mcq)
