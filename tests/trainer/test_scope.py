"""SCOPE: search-turn sampling, Challenger/Solver prompts, format rewards and reward wiring."""

import random

import pytest

from trainer.methods.parts import stratified_counts, stratified_draw
from trainer.methods.scope_prompts import TASK_TYPES, challenger_prompt, parse_task, solver_prompt


def _turns(*assistant):
    """A trajectory's turns: assistant texts with a tool response after every non-final one."""
    out = []
    for i, text in enumerate(assistant):
        out.append({"role": "assistant", "text": text})
        if i < len(assistant) - 1:
            out.append({"role": "tool", "text": "<information>Doc 1 ...</information>"})
    return out


def test_it_allocates_search_turns_in_the_4_3_2_ratio():
    assert stratified_counts(9, [4, 3, 2]) == [4, 3, 2]
    assert stratified_counts(18, [4, 3, 2]) == [8, 6, 4]
    # 4 prompts: exact 1.78, 1.33, 0.89 -> floors 1,1,0, largest remainders .89 then .78 -> [2, 1, 1]
    assert stratified_counts(4, [4, 3, 2]) == [2, 1, 1]
    draws = stratified_draw(90, [4, 3, 2], random.Random(0))
    assert sorted(set(draws)) == [1, 2, 3]
    assert [draws.count(n) for n in (1, 2, 3)] == [40, 30, 20]


def test_it_rejects_bad_ratios_with_a_clear_message():
    with pytest.raises(ValueError, match="positive sum"):
        stratified_counts(3, [0, 0])


def test_the_challenger_prompt_names_type_count_and_document():
    text = challenger_prompt("Doc about the SS El Faro.", "planning", 2)
    assert "**Planning**" in text and "**2**" in text and "SS El Faro" in text
    assert "<task><question>" in text
    with pytest.raises(ValueError, match="unknown SCOPE task type"):
        challenger_prompt("d", "poetry", 1)
    assert set(TASK_TYPES) == {"long_form_qa", "summarisation", "planning", "writing"}
    assert "at most 3 times" in solver_prompt("Why?", 3) and "Question: Why?" in solver_prompt("Why?", 3)


def test_it_parses_the_task_question():
    assert parse_task("<think>x</think><task><question> Compare A and B. </question></task>") == "Compare A and B."
    assert parse_task("<task>Compare A and B.</task>") == "Compare A and B."
    assert parse_task("no task here") is None
    assert parse_task("<task><question></question></task>") is None
