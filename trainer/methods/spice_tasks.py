"""SPICE's prompts, strict task parsing and the small pure pieces of its loop.

The Challenger is one two-turn conversation over a corpus document (spice.txt, Appendix 11):

1. turn one (Figure 9): read the document and pick the task format as JSON:
   ``{"suitable_for_mcq": bool, "suitable_for_free_form": bool, "best_answer_type": ..., "reason": ...}``;
2. turn two (Figure 10): write the task as JSON, MCQ (``multiple_choice_question`` with options
   A) to D) inline, ``multiple_choice_correct``) or free-form (``question``, ``answer``,
   ``answer_type``).

Wording is ours, structure is the paper's (steps, field names, output rules). The paper runs
the two prompts as two separate calls that both hold the document; we continue the same
conversation instead, so the document is read once. Parsing is strict: the JSON must load
as written (code fences around it are tolerated, broken JSON is never repaired), required
fields must be present and non-empty, and the answer must match its declared type. Anything
else makes the task invalid, with a short reason kept for the sink.

The Reasoner sees only the question (Figure 8: "reason step by step ... \\boxed{}").
"""
from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

ANSWER_TYPES = ("integer", "float", "expression", "string", "boolean")
MCQ_LETTERS = ("A", "B", "C", "D")

FORMAT_PROMPT = """Read this document and decide whether it is better suited to a CHALLENGING multiple-choice \
question (MCQ) or to a CHALLENGING free-form question.

Document:
{document}

What each format needs:

Multiple choice:
- complex relationships and reasoning paths with several steps
- room for 3 wrong options that are plausible
- the synthesis of several concepts
- understanding that well-made wrong options can test

Free-form:
- specific calculations (Integer or Float answers)
- formulas or relations to derive (Expression answers)
- precise terms or names (String answers, 1-3 words)
- claims to check across several facts (Boolean answers)
- exactly one clear correct answer

Pick EXACTLY ONE format that would give the best challenging question for this document.{format_rule}

Reply with ONLY a JSON object (no markdown, no text before or after it) of this form:
{{"suitable_for_mcq": <true or false>, "suitable_for_free_form": <true or false>, \
"best_answer_type": <{answer_type_choices} or null>, "reason": "<short reason, plain words>"}}
For example:
{{"suitable_for_mcq": false, "suitable_for_free_form": true, "best_answer_type": "Integer", \
"reason": "the document gives dates that can be combined"}}

RULES:
1. Output the JSON object and nothing else.
2. Exactly one of suitable_for_mcq and suitable_for_free_form is true.
3. best_answer_type is null for a multiple-choice question.
4. No backticks, no LaTeX, no special characters in reason; keep it under 100 characters."""

MCQ_PROMPT = """Now write a CHALLENGING multiple-choice exam question from the document above, one that needs \
several connected ideas and more than one reasoning step.

## Step 1: Find information that needs synthesis
Look for relationships between ideas from different parts of the document, calculations or procedures with \
dependent steps, conclusions that follow only from combining stated facts, trade-offs and conditional rules.
Avoid single stated facts, stand-alone definitions and isolated numbers: they make easy questions.

## Step 2: Plan how to make it hard
Say which easy version you avoid, which layers you add, which ideas the student must connect and which \
shortcuts you block. Put this in "hardening_process".

## Step 3: Write the question
It applies several ideas from different parts of the document, tests relationships rather than recall, and \
may use a "what if" variation of the document's principles.
The question must stand alone: never write "according to the text", "in the document", "the passage states" \
or the like. Give every piece of context and define special terms inside the question.

## Step 4: Aim for Hard or Extra Hard
It must not be answerable by looking up one fact, finding one sentence or matching keywords.

## Step 5: Write the four options
Options A) B) C) D) of about equal length, the same units and formatting, a neutral tone, and wrong options \
that are plausible to someone with partial understanding (typical slips in the calculation, partial reasoning, \
related concepts mixed up).
Write them inside the question text:
"<question text> A) <option> B) <option> C) <option> D) <option>"

## Step 6: Test it yourself
Solve it as a student would. If two options can be ruled out without understanding, if the options give the \
answer away, or if it takes fewer than 3 reasoning steps, make it harder. Put your solution in \
"self_test_solution".

## Output format
First think step by step (privately). Then output ONE JSON object, without markdown or code fences, with:
- "hardening_process": your strategy from Step 2
- "multiple_choice_question": the complete stand-alone question with options A) to D); empty string if the \
document lacks enough substance
- "multiple_choice_correct": the letter of the correct option (A, B, C or D); empty string if no question
- "self_test_solution": your solution from Step 6
- "question_difficulty": "Hard" or "Extra Hard"

Example of the structure:
{{"hardening_process": "...", "multiple_choice_question": "... A) ... B) ... C) ... D) ...", \
"multiple_choice_correct": "B", "self_test_solution": "...", "question_difficulty": "Hard"}}"""

FREE_FORM_PROMPT = """Now write a CHALLENGING free-form question from the document above whose answer has the \
type: {answer_type}.

## Step 1: Find information that needs synthesis, for a {answer_type} answer
- Integer or Float: calculations over several parts of the document, dependent steps, rates, ratios, counts.
- Expression: relations between variables that form a formula or equation.
- String: a precise term, name or identifier of 1-3 words at most (e.g. "Newton", "gradient descent", "Paris").
- Boolean: a claim whose truth needs several facts to be checked together.
Avoid direct lookups, simple arithmetic, verbatim definitions and trivial yes/no questions.

## Step 2: Plan how to make it hard
Say which easy version you avoid, which layers you add, which parts of the document must be combined and which \
shortcuts you block. Put this in "hardening_process".

## Step 3: Write the question
It connects 3 or more ideas, forces several reasoning steps and has exactly one correct answer. It must stand \
alone: never write "according to the text", "in the document" or the like; give all context, definitions, \
units and the expected precision inside the question.

## Step 4: Make the answer precise
- Integer: a whole number, no decimals or ranges ("answer": 42).
- Float: a decimal number; say the precision in the question ("answer": 3.14).
- Expression: standard notation in simplest form ("answer": "2*x^2 + 3*x - 5").
- String: 1-3 words, no extra punctuation ("answer": "Paris").
- Boolean: exactly true or false ("answer": true).
The answer is a plain value, never a list or an object.

## Step 5: Solve it yourself
Work through the full solution step by step and check the answer has the required type. Put it in \
"step_by_step_solution".

## Output format
First think step by step (privately). Then output ONE JSON object, without markdown or code fences, with:
- "identified_information": the pieces of the document the question needs
- "hardening_process": your strategy from Step 2
- "question": exactly one stand-alone question as a single string; empty string if the document lacks \
material for a {answer_type} answer
- "answer": the answer as a plain value of type {answer_type}; empty string if not derivable from the document
- "answer_type": "{answer_type}"
- "step_by_step_solution": your solution from Step 5
- "difficulty_level": "Hard" or "Extra Hard"

Example of the structure:
{{"identified_information": ["...", "..."], "hardening_process": "...", "question": "...", "answer": 42, \
"answer_type": "{answer_type}", "step_by_step_solution": "...", "difficulty_level": "Hard"}}"""

REASONER_FREE_FORM = "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
REASONER_MCQ = ("{question}\n\nPlease reason step by step, and put the letter of the correct option "
                "(A, B, C or D) within \\boxed{{}}.")


class TaskError(ValueError):
    """A Challenger output that does not make a valid task; ``str(err)`` is the reason."""


@dataclass(frozen=True)
class FormatChoice:
    format: str  # "mcq" | "free_form"
    answer_type: str | None  # one of ANSWER_TYPES for free_form, None for mcq


@dataclass(frozen=True)
class SpiceTask:
    format: str  # "mcq" | "free_form"
    answer_type: str  # "mcq" for MCQ, else one of ANSWER_TYPES
    question: str
    answer: str  # the gold: a letter for MCQ


def format_prompt(document: str, formats: Sequence[str], answer_types: Sequence[str]) -> str:
    """Turn one of the Challenger (Figure 9 structure)."""
    rule = ""
    if list(formats) == ["mcq"]:
        rule = " Only multiple choice is allowed here: set suitable_for_mcq to true."
    elif list(formats) == ["free_form"]:
        rule = " Only free-form is allowed here: set suitable_for_free_form to true."
    choices = " or ".join(f'"{t.capitalize()}"' for t in answer_types)
    return FORMAT_PROMPT.format(document=document, format_rule=rule, answer_type_choices=choices)


def task_prompt(choice: FormatChoice) -> str:
    """Turn two of the Challenger (Figure 10 structure) for the chosen format."""
    if choice.format == "mcq":
        return MCQ_PROMPT
    return FREE_FORM_PROMPT.format(answer_type=choice.answer_type.capitalize())


def reasoner_prompt(task: SpiceTask) -> str:
    template = REASONER_MCQ if task.format == "mcq" else REASONER_FREE_FORM
    return template.format(question=task.question)


def json_objects(text: str) -> list[dict]:
    """Every JSON object that loads as written from a ``{`` in ``text``, outermost first, in order."""
    decoder = json.JSONDecoder()
    found, i = [], 0
    while True:
        start = text.find("{", i)
        if start < 0:
            return found
        try:
            obj, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python's stack
            i = start + 1
            continue
        if isinstance(obj, dict):
            found.append(obj)
        i = end


def _last_with(text: str, keys: Sequence[str]) -> dict:
    """The last JSON object holding every key in ``keys`` (the model may think in JSON first)."""
    objects = [o for o in json_objects(text) if all(k in o for k in keys)]
    if not objects:
        if not json_objects(text):
            raise TaskError("no parsable JSON object")
        raise TaskError(f"JSON lacks {' / '.join(keys)}")
    return objects[-1]


def parse_format_choice(text: str, formats: Sequence[str], answer_types: Sequence[str]) -> FormatChoice:
    """Turn one's JSON -> FormatChoice, or TaskError (exactly one format true, known answer type)."""
    obj = _last_with(text, ("suitable_for_mcq", "suitable_for_free_form"))
    mcq, free = obj["suitable_for_mcq"], obj["suitable_for_free_form"]
    if not isinstance(mcq, bool) or not isinstance(free, bool):
        raise TaskError("suitable_for_* must be true or false")
    if mcq == free:
        raise TaskError("exactly one of suitable_for_mcq / suitable_for_free_form must be true")
    fmt = "mcq" if mcq else "free_form"
    if fmt not in formats:
        raise TaskError(f"format {fmt} is not allowed in this run")
    if fmt == "mcq":
        return FormatChoice("mcq", None)
    kind = obj.get("best_answer_type")
    kind = kind.strip().lower() if isinstance(kind, str) else None
    if kind not in answer_types:
        raise TaskError(f"best_answer_type must be one of {', '.join(answer_types)}")
    return FormatChoice("free_form", kind)


_OPTION = re.compile(r"(?:^|[\s(\[])([A-D])\s*[).:]")


def _has_four_options(question: str) -> bool:
    letters = _OPTION.findall(question)
    return all(letter in letters for letter in MCQ_LETTERS)


def _scalar_text(value) -> str:
    """A JSON scalar as text (true -> "true", 42 -> "42"); lists and objects are refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value.strip()
    raise TaskError("answer must be a plain value, not a list or an object")


def _check_answer(answer: str, kind: str, max_string_words: int) -> str:
    if kind == "integer":
        cleaned = answer.replace(",", "")
        if not re.fullmatch(r"[+-]?\d+(\.0+)?", cleaned):
            raise TaskError(f"integer answer expected, got {answer!r}")
        return cleaned.split(".")[0]
    if kind == "float":
        try:
            value = float(answer.replace(",", ""))
        except ValueError:
            raise TaskError(f"float answer expected, got {answer!r}") from None
        if not math.isfinite(value) or "_" in answer:  # float() also reads "nan", "inf", "1e999" and "1_000"
            raise TaskError(f"float answer must be a finite decimal number, got {answer!r}")
        return answer.replace(",", "")
    if kind == "boolean":
        if answer.lower() not in ("true", "false"):
            raise TaskError(f"boolean answer must be true or false, got {answer!r}")
        return answer.lower()
    if kind == "string" and len(answer.split()) > max_string_words:
        raise TaskError(f"string answer has more than {max_string_words} words")
    return answer


def parse_task(text: str, choice: FormatChoice, max_string_words: int = 3) -> SpiceTask:
    """Turn two's JSON -> SpiceTask, or TaskError saying why the task is invalid."""
    if choice.format == "mcq":
        obj = _last_with(text, ("multiple_choice_question", "multiple_choice_correct"))
        question, letter = obj["multiple_choice_question"], obj["multiple_choice_correct"]
        if not isinstance(question, str) or not question.strip():
            raise TaskError("empty multiple_choice_question")
        if not isinstance(letter, str) or letter.strip().strip(")").upper() not in MCQ_LETTERS:
            raise TaskError("multiple_choice_correct must be A, B, C or D")
        if not _has_four_options(question):
            raise TaskError("question does not list options A) to D)")
        return SpiceTask("mcq", "mcq", question.strip(), letter.strip().strip(")").upper())
    obj = _last_with(text, ("question", "answer"))
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise TaskError("empty question" if isinstance(question, str) else "question must be one string")
    declared = obj.get("answer_type")
    if declared is not None and (not isinstance(declared, str) or declared.strip().lower() != choice.answer_type):
        raise TaskError(f"answer_type {declared!r} differs from the chosen {choice.answer_type}")
    answer = _scalar_text(obj["answer"])
    if not answer:
        raise TaskError("empty answer")
    answer = _check_answer(answer, choice.answer_type, max_string_words)
    return SpiceTask("free_form", choice.answer_type, question.strip(), answer)


def keep_preserving_ratio(valid: Sequence[bool], group_size: int, rng: random.Random) -> list[int]:
    """Indices of ``group_size`` attempts whose valid:invalid ratio matches all attempts'.

    Valid slots: round(G * v / N), at least 1 when any attempt is valid, topped up from the other
    kind when one kind runs short. Fewer attempts than G: all are kept.
    N=16, 6 valid, G=8 -> 8*6/16 = 3 valid + 5 invalid;  N=16, 1 valid, G=8 -> 0.5 -> 1 valid + 7 invalid.
    """
    good = [i for i, v in enumerate(valid) if v]
    bad = [i for i, v in enumerate(valid) if not v]
    n = len(valid)
    if n <= group_size:
        return list(range(n))
    n_good = min(len(good), max(int(group_size * len(good) / n + 0.5), 1 if good else 0))
    n_bad = min(len(bad), group_size - n_good)
    n_good = group_size - n_bad  # top up with valid ones if invalid ones ran short
    return sorted(rng.sample(good, n_good) + rng.sample(bad, n_bad))
