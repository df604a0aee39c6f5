"""SPICE's prompts, strict task parsing and the small pure pieces of its loop.

The Challenger is one two-turn conversation over a corpus document (spice.txt, Appendix 11):

1. turn one (Figure 9): read the document and pick the task format as JSON:
   ``{"suitable_for_mcq": bool, "suitable_for_free_form": bool, "best_answer_type": ..., "reason": ...}``;
2. turn two (Figure 10): write the task as JSON, MCQ (``multiple_choice_question`` with options
   A) to D) inline, ``multiple_choice_correct``) or free-form (``question``, ``answer``,
   ``answer_type``).

Wording is ours and short, structure is the paper's (the two turns, field names, output rules):
each prompt ends with the exact JSON form (and, with ``spice.worked_example``, a worked example for
another document: on for SmolLM2, off by default since a 0.5B model only imitates it; a task
restating it is invalid, ``copies_example``), and each assistant turn opens
with the start of its JSON (``FORMAT_PREFILL`` / ``TASK_PREFILL``, prompt tokens): with the
paper's long step-by-step guidance SmolLM2-135M-Instruct wrote no valid task (0/16), with
these 2/16 at temperature 0.7 once copies of the worked example count as invalid (14/16 parse,
12 of them copies; benchmarks/RESULTS.md, "SPICE Challenger formats"). The paper runs
the two prompts as two separate calls that both hold the document; we continue the same
conversation instead, so the document is read once. Parsing is strict: the JSON must load
as written (code fences around it are tolerated, broken JSON is never repaired), required
fields must be present and non-empty, and the answer must match its declared type. Anything
else makes the task invalid, with a short reason kept for the sink.

The Reasoner sees only the question (Figure 8: "reason step by step ... \\boxed{}").

The two roles' generation lives here too (``challenge``: one batch of Challenger conversations;
``answer``: the Reasoner's answers, graded by ``is_correct``), because the recipe
(``trainer/methods/spice.py``) and the cross-play evaluation (``trainer/evaluate.py``) both call
them; library code never imports the recipe.
"""
from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainer.methods.gate import (GUESS_PROMPT_SUFFIX, ANSWER_IN_QUESTION, MIN_QUESTION_WORDS, NO_WORDS, NOT_GROUNDED,
                                  REFERS_TO_DOCUMENT, REPEATED, REPEATED_ANSWER, MCQ_LETTERS, NUMERIC_ANSWER_TYPES,
                                  OPTIONS_UNCLEAR, GateTask, check_task, question_key, reader_prompt, shuffle_options)
from trainer.prompts import chat
from trainer.tools.corpus import document_text
from trainer.verify import exact_match, extract_boxed, math_equal_many, mcq_match

ANSWER_TYPES = ("integer", "float", "expression", "string", "boolean")

# Short prompts ending with the exact JSON to write (see the module docstring for why).
FORMAT_PROMPT = """Document:
{document}

Which question format fits this document best? A multiple-choice question (MCQ: four options, needs several \
connected facts, three plausible wrong options) or a free-form question with one exact short answer (a number, \
a formula, a name of 1-3 words, or true/false). Pick the one that gives the hardest question.{format_rule}

For a multiple-choice question set suitable_for_mcq to true and best_answer_type to null; for a free-form \
question set suitable_for_free_form to true and best_answer_type to {answer_type_choices}.
Reply with ONLY one line of JSON like this example:
{{"suitable_for_mcq": false, "suitable_for_free_form": true, "best_answer_type": "Integer", "reason": "has numbers"}}"""

MCQ_PROMPT = """Now write one hard multiple-choice question from the document above. It needs at least two \
connected facts from the document, and it must stand alone: the student never sees the document, so never \
write "the text" or "the document". Put four options A) B) C) D) inside the question: one correct, three \
plausible but wrong.

Reply with ONLY this JSON object, nothing before or after it:
{"multiple_choice_question": "<question> A) <option> B) <option> C) <option> D) <option>", \
"multiple_choice_correct": "<A, B, C or D>"}"""
MCQ_EXAMPLE = """
Example (for another document):
{"multiple_choice_question": "Which river flows through both Vienna and Budapest? A) Rhine B) Danube C) Elbe \
D) Vistula", "multiple_choice_correct": "B"}"""

ANSWER_RULES = {  # the answer_type's rule and an example answer, as JSON
    "Integer": ("a whole number", "390"),
    "Float": ("a decimal number; the question says the precision", "1.25"),
    "Expression": ("a formula in simplest form", '"2*x^2 + 3*x"'),
    "String": ("a name or term of 1-3 words", '"Paris"'),
    "Boolean": ("true or false", "true"),
}

FREE_FORM_PROMPT = """Now write one hard question from the document above whose answer has the type: \
{answer_type} ({answer_rule}). It needs at least two connected facts from the document, has exactly one \
correct answer, and must stand alone: the student never sees the document, so never write "the text" or \
"the document".

Reply with ONLY this JSON object, nothing before or after it:
{{"question": "<the question>", "answer": <the answer>, "answer_type": "{answer_type}"}}"""
FREE_FORM_EXAMPLE = """
Example (for another document):
{{"question": "{example_question}", "answer": {example_answer}, "answer_type": "{answer_type}"}}"""

EXAMPLE_QUESTIONS = {  # each with the answer in ANSWER_RULES: 12*25+3*30=390; 150/120=1.25; x*(2x+3)
    "Integer": "A school has 12 classes of 25 pupils and 3 classes of 30 pupils; how many pupils does it have?",
    "Float": "A car covers 150 km in 2 hours; what is its mean speed in km per minute, to two decimals?",
    "Expression": "A rectangle is x wide and 2*x + 3 long; what is its area as a polynomial in x?",
    "String": "Which city hosted both the 1900 and the 1924 Summer Olympics?",
    "Boolean": "Was the Eiffel Tower completed before the first modern Olympic Games were held?",
}

MCQ_EXAMPLE_QUESTION = "Which river flows through both Vienna and Budapest? A) Rhine B) Danube C) Elbe D) Vistula"
assert MCQ_EXAMPLE_QUESTION in MCQ_EXAMPLE


def _word_runs(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


_UNITS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i > 1}
_STOP = set("""a an the and or but of in on at to for from by with without as is are was were be been being do does did
has have had having it its this that these those there their they them he she his her we you your i my our what which
who whom whose when where why how many much more most less than then so such both each every any all some no not
only also into onto over under about after before between per if else whether can could would should will shall may
might must one ones total number numbers question answer example through during while within among
same other another following given called""".split())


def _numbers(words: list[str]) -> set[str]:
    """The numbers of a tokenized text, spelled-out ones included ("twenty five" -> "25"), commas dropped."""
    found, i = set(), 0
    while i < len(words):
        w = words[i]
        if re.fullmatch(r"\d+(?:\.\d+)?", w):
            found.add(w.lstrip("0") or "0")
        elif w in _TENS:
            unit = _UNITS.get(words[i + 1], 0) if i + 1 < len(words) and _UNITS.get(words[i + 1], 10) < 10 else 0
            found.add(str(_TENS[w] + unit))
            i += 1 if unit else 0
        elif w in _UNITS and w != "one":  # "one" is mostly a pronoun ("which one")
            found.add(str(_UNITS[w]))
        i += 1
    return found


def _stem(word: str) -> str:
    """A crude suffix stem, enough for "classes" = "class", "hosted" = "hosts", "completed" = "complete"."""
    if word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    for suffix in ("ies", "s", "ed", "ing"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith(("ss", "us", "eed")):
            word = word[:-len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


@dataclass(frozen=True)
class ExampleSignature:
    """What a question must not carry over from a worked example: its numbers and its content words."""

    runs: frozenset  # the example's runs of 5 words
    numbers: frozenset  # "12", "25", ...
    words: frozenset  # stemmed content words, numbers and stop words left out

    @classmethod
    def of(cls, text: str) -> "ExampleSignature":
        words = re.findall(r"[a-z]+|\d+(?:\.\d+)?", text.lower().replace(",", ""))
        numbers = _numbers(words)
        content = {_stem(w) for w in words if w.isalpha() and w not in _STOP and w not in _UNITS and w not in _TENS
                   and len(w) > 1}
        return cls(frozenset(_word_runs(text)), frozenset(numbers), frozenset(content))

    def restated_by(self, question: "ExampleSignature") -> bool:
        if self.runs & question.runs:
            return True
        shared_numbers = len(self.numbers & question.numbers)
        shared_words = len(self.words & question.words)
        if shared_words >= 5 and shared_words >= WORDS_SHARE * len(self.words):
            return True  # the example's content, with or without its numbers
        if self.numbers and 2 * shared_numbers < len(self.numbers):
            return False  # the example's numbers make it: a question without most of them is another question
        shared = (shared_numbers + shared_words) / (len(self.numbers) + len(self.words))
        return shared >= RESTATES_SHARE and shared_numbers + shared_words >= 3


RESTATES_SHARE = 0.5  # share of an example's numbers + content words that makes a question its restatement
WORDS_SHARE = 0.6  # ... or of its content words alone (5 at least), numbers dropped


def _signatures() -> list[ExampleSignature]:
    return [ExampleSignature.of(q) for q in [*EXAMPLE_QUESTIONS.values(), MCQ_EXAMPLE_QUESTION]]


_EXAMPLES = _signatures()


def copies_example(question: str) -> bool:
    """Does ``question`` restate one of the prompt's worked examples, reworded or not?

    Restating = a run of 5 words in common with the example, or, paraphrases included, one of:
    - at least half of the example's numbers (spelled-out numbers count) and, together with its
      content words (stop words dropped, crude stems: "classes" = "class"), at least half of what
      the example is made of (``RESTATES_SHARE``), 3 items or more;
    - at least 60% of its content words, 5 or more (``WORDS_SHARE``), numbers or not.
    "There are 12 classes with 25 students each and 3 classes with 30 students; how many students in
    all?" shares the 4 numbers and "class" of the Integer example: 5 of its 7 items. "What is the
    mean speed of the car in km per minute?" shares 5 of the Float example's 8 content words.
    "How many pupils does the school founded in 1821 have?" (2 of 7) and "Which city hosted the
    2012 Summer Olympics?" (none of the String example's numbers, 4 words) pass. Checked on
    rewordings written by Qwen2.5-Coder-0.5B and on its own tasks (tests/trainer/test_spice_example_copies.py).

    The examples are there to show the JSON, not the content: a task built on one is not grounded
    in the document. On an H100 run SmolLM2-135M's valid tasks drifted to copies of the Integer
    example within 10 steps, because a valid task the Reasoner never solves still earns the
    gaussian reward exp(-(0 - 0.25)^2 / 0.02) = 0.044 > the invalid penalty (benchmarks/RESULTS.md);
    Qwen2.5-Coder-0.5B wrote a reworded one with a wrong gold answer (issue 21)."""
    mine = ExampleSignature.of(question)
    return any(example.restated_by(mine) for example in _EXAMPLES)


# Both Challenger turns open with the start of their JSON (prompt tokens, never trained; parsed
# together with the reply, which must still complete valid JSON). With these prefixes
# SmolLM2-135M-Instruct's task turn parses 14/16 times at temperature 0.7 (0/16 without); most of
# those copy the worked example, which ``copies_example`` refuses.
FORMAT_PREFILL = '{"suitable_for_mcq":'
TASK_PREFILL = {"mcq": '{"multiple_choice_question": "', "free_form": '{"question": "'}

REASONER_SYSTEM = "You are a helpful assistant."  # the paper's Reasoner system prompt (spice.txt, Figure 8)
REASONER_FREE_FORM = "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
REASONER_MCQ = ("{question}\n\nPlease reason step by step, and put the letter of the correct option "
                "(A, B, C or D) within \\boxed{{}}.")


class TaskError(ValueError):
    """A Challenger output that does not make a valid task; ``str(err)`` is the reason. ``task``: the parsed
    task when it parsed but broke a rule (answer in question, not about the document, ...), so the run's records
    and its task ledger still show the question that was refused."""

    def __init__(self, message: str, task: "SpiceTask | None" = None):
        super().__init__(message)
        self.task = task


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


JSON_ONLY = "Reply with ONLY this JSON object, nothing before or after it:"
# The paper's "Output Format" (spice.txt, Figures 9-10): think first, then the JSON (spice.think_before_task).
THINK_FIRST = ("FIRST, think step by step (this is private): pick the facts the question needs, say how you make it "
               "hard and how you block shortcuts, and solve it yourself to check that it has exactly one answer. "
               "THEN end your reply with this JSON object:")


# (no example of a refused question: told "How many districts does Warsaw have?" is refused, the 1.5B base wrote
# "How many districts does Leeds have?", benchmarks/RESULTS.md)
RECALL_RULE = (" The student must work the answer out from the question: give in it the numbers the answer comes "
               "from. A question that only asks to recall a number, a count, a year or a size is refused.")


def task_prompt(choice: FormatChoice, worked_example: bool = False, think: bool = False, recall: bool = False) -> str:
    """Turn two of the Challenger (Figure 10 structure) for the chosen format; ``worked_example`` adds
    a filled-in task for another document after the JSON form (``spice.worked_example``); ``think`` asks for
    step-by-step reasoning before the JSON (``spice.think_before_task``) instead of the JSON alone; ``recall``
    (``gate.recall``) tells the writer of an integer, float or expression task the recall rule (``RECALL_RULE``)."""
    if choice.format == "mcq":
        text = MCQ_PROMPT + (MCQ_EXAMPLE if worked_example else "")
    else:
        kind = choice.answer_type.capitalize()
        rule, example = ANSWER_RULES[kind]
        fields = dict(answer_type=kind, answer_rule=rule, example_question=EXAMPLE_QUESTIONS[kind],
                      example_answer=example)
        text = FREE_FORM_PROMPT.format(**fields) + (FREE_FORM_EXAMPLE.format(**fields) if worked_example else "")
        if recall and choice.answer_type in (*NUMERIC_ANSWER_TYPES, "expression"):  # a formula can be a number
            text = text.replace("\n\n" + JSON_ONLY, RECALL_RULE + "\n\n" + JSON_ONLY, 1)
    return text.replace(JSON_ONLY, THINK_FIRST) if think else text


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


# the task rules beyond "parses and matches its type", by the metric name step_metrics gives them (gate.py has all
# but copies_example, which is about SPICE's own prompt)
TASK_RULES = {"copies_example": "question copies the prompt's example", "answer_in_question": ANSWER_IN_QUESTION,
              "no_words": NO_WORDS, "refers_to_document": REFERS_TO_DOCUMENT, "not_grounded": NOT_GROUNDED,
              "repeated": REPEATED, "repeated_answer": REPEATED_ANSWER}


def parse_task(text: str, choice: FormatChoice, max_string_words: int = 3,
               min_words: int = MIN_QUESTION_WORDS, document: str | None = None, *, require_grounding: bool = True,
               max_copy_ratio: float = 1.0, recall: bool = False) -> SpiceTask:
    """Turn two's JSON -> SpiceTask, or TaskError saying why the task is invalid.

    Beyond the paper's "formatted correctly and parsable" (and ``copies_example``), two rules of
    ours make a task invalid, in this order:
    - "answer in question" (free-form, not boolean): the question states its gold answer, as the
      grader compares answers (``parts.answer_in_question``: normalized whole words, numbers by
      value), so the Reasoner could copy it; e.g. "What is the name of the island Sulawesi?" ->
      "Sulawesi", "The volume is 5,000 cubic kilometers." -> 5000, or a string of digits asked
      and answered with itself. An MCQ's letter and a boolean's true/false are a choice among
      given options, never a copy;
    - "question has no words" (both formats): fewer than ``min_words`` whitespace tokens holding a
      letter (``parts.count_words``; an MCQ's option labels do not count), e.g. a "question" that is
      a string of digits. Qwen2.5-Coder-0.5B's Challenger collapsed to both within ~30 steps
      (question "1234567890..." -> answer "1234567890...", its Reasoner learned to copy, held-out
      GSM8K fell from 28.0% to 14.2% on an H100 run);
    - "question refers to the document" (both formats; ``refers_to_document``): the paper's prompt
      makes it a CRITICAL rule that a question never mentions "the text", "the document", "the
      passage" or "as mentioned" (the Reasoner never sees it); we also check it. Qwen2.5-Coder-1.5B's
      Challenger collapsed within 15 steps to questions about the text's form answered 1 ("How many
      paragraphs are there in the given text?"; 44 of 48 of its final tasks, 2 of 48 of the base's);
    - "question is not about the document" (both formats; ``grounded``, only when ``document`` is given): the
      question shares no content word with the document. The next run's 1.5B Challenger collapsed within 33
      steps to "How many correct answers? -> 1" (96 of its 96 held-out tasks; 4 of the base's 96), which no
      other rule catches;
    - "question copies its document" (``max_copy_ratio`` < 1, with a document): more of the question's character
      6-grams in the document than that share;
    - "question asks for a number it gives nothing to work out from" (``recall``, ``gate.recall``): a numeric
      task whose question holds no number (``gate.asks_recall``).
    The rules after the example check are the task gate's (``gate.check_task``), which every writer shares."""
    if choice.format == "mcq":
        obj = _last_with(text, ("multiple_choice_question", "multiple_choice_correct"))
        question, letter = obj["multiple_choice_question"], obj["multiple_choice_correct"]
        if not isinstance(question, str) or not question.strip():
            raise TaskError("empty multiple_choice_question")
        if not isinstance(letter, str) or letter.strip().strip(")").upper() not in MCQ_LETTERS:
            raise TaskError("multiple_choice_correct must be A, B, C or D")
        if not _has_four_options(question):
            raise TaskError("question does not list options A) to D)")
        task = SpiceTask("mcq", "mcq", question.strip(), letter.strip().strip(")").upper())
        if copies_example(question):
            raise TaskError("question copies the prompt's example instead of asking about the document", task)
        return _gated(task, document, min_words, require_grounding, max_copy_ratio, recall)
    obj = _last_with(text, ("question", "answer"))
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise TaskError("empty question" if isinstance(question, str) else "question must be one string")
    if copies_example(question):  # a rule refusal: the question stays on record (its answer is not read)
        raise TaskError("question copies the prompt's example instead of asking about the document",
                        SpiceTask("free_form", choice.answer_type, question.strip(), ""))
    declared = obj.get("answer_type")
    if declared is not None and (not isinstance(declared, str) or declared.strip().lower() != choice.answer_type):
        raise TaskError(f"answer_type {declared!r} differs from the chosen {choice.answer_type}")
    answer = _scalar_text(obj["answer"])
    if not answer:
        raise TaskError("empty answer")
    answer = _check_answer(answer, choice.answer_type, max_string_words)
    task = SpiceTask("free_form", choice.answer_type, question.strip(), answer)
    return _gated(task, document, min_words, require_grounding, max_copy_ratio, recall)


def _gated(task: SpiceTask, document: str | None, min_words: int, require_grounding: bool,
           max_copy_ratio: float, recall: bool = False) -> SpiceTask:
    """The task, or TaskError carrying it (its question stays on record) when a gate rule refuses it."""
    reason = check_task(GateTask(task.question, task.answer, document, task.format, task.answer_type),
                        max_copy_ratio=max_copy_ratio, require_grounding=require_grounding, min_words=min_words,
                        recall=recall)
    if reason:
        raise TaskError(reason, task)
    return task


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


# ---- the two roles' generation (the recipe and trainer.evaluate's cross-play both call these) ---------

@dataclass
class Attempt:
    """One Challenger conversation over one document, and what came of it."""

    doc_id: str
    doc_title: str
    index: int
    key: str
    prompt_ids: list[int]
    group: int = 0  # position of the document in the step's batch
    round: int = 0  # the retry round that drew it (SPICE's Challenger retries)
    completion_ids: list[int] = field(default_factory=list)  # turn one + user turn two + turn two
    loss_mask: list[int] = field(default_factory=list)  # 0 on the user turn
    logprobs: list[float] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    choice: FormatChoice | None = None
    task: SpiceTask | None = None
    reason: str = ""  # why the task is invalid ("" when valid)
    kept: bool = False
    answers: list = field(default_factory=list)  # Reasoner Completions
    correct: list[bool] | None = None  # what the Reasoner is rewarded by: the verdicts, or a control's coin flips
    graded: list[bool] | None = None  # the grader's verdicts of the answers (= correct unless a control flips it)
    guessed: list[bool] | None = None  # the guess probe's verdicts (task gate)
    agrees: list[bool] | None = None  # the document reader's answers agreeing with the gold (task gate)
    cluster_share: float = 0.0  # the task's template cluster's share of the step's valid tasks
    reward: float = 0.0
    trained_reasoner: bool = False
    truncated: bool = False  # a Challenger turn ended at its token budget
    written_letter: str | None = None  # an MCQ's gold letter as the Challenger wrote it, before its options moved

    @property
    def valid(self) -> bool:
        return self.task is not None and not self.reason

    @property
    def pass_rate(self) -> float | None:
        """The Reasoner's real pass rate (the grader's verdicts, also in a control run)."""
        verdicts = self.graded if self.graded is not None else self.correct
        return sum(verdicts) / len(verdicts) if verdicts else None

    def extend(self, ids: list[int], logprobs: list[float], trained: bool) -> None:
        self.completion_ids += ids
        self.logprobs += logprobs if trained else [0.0] * len(ids)
        self.loss_mask += [1 if trained else 0] * len(ids)


def is_correct(task: SpiceTask, completion_text: str) -> bool:
    """The Reasoner's boxed answer checked against the gold by the task's answer type."""
    return grade([(task, completion_text)])[0]


def grade(answers: Sequence[tuple[SpiceTask, str]]) -> list[bool]:
    """``is_correct`` of many (task, Reasoner text) pairs: the math checks go to
    ``verify.math_equal_many`` together (asked once per distinct answer, several helpers at once)."""
    out: list[bool | None] = []
    math = []  # (index, boxed, gold)
    for i, (task, text) in enumerate(answers):
        boxed = extract_boxed(text)
        if boxed is None:
            out.append(False)
        elif task.format == "mcq":
            out.append(mcq_match(boxed, task.answer))
        elif task.answer_type in ("integer", "float", "expression"):
            out.append(None)
            math.append((i, boxed, task.answer))
        else:
            out.append(exact_match(boxed, task.answer))
    for (i, _, _), ok in zip(math, math_equal_many([(b, g) for _, b, g in math])):
        out[i] = ok
    return [bool(v) for v in out]


def continue_chat(tokenizer, user: str, ended_with_eos: bool) -> list[int]:
    """Token ids closing the assistant turn, adding a user turn and opening the next assistant turn."""
    if getattr(tokenizer, "chat_template", None):
        sentinel = "@@SPICE-TURN@@"
        messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": sentinel},
                    {"role": "user", "content": user}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        glue = text[text.index(sentinel) + len(sentinel):]
        eos = tokenizer.eos_token or ""
        if ended_with_eos and eos and glue.startswith(eos):
            glue = glue[len(eos):]
    else:
        glue = f"\n\nUser: {user}\n\nAssistant:"
    return tokenizer.encode(glue, add_special_tokens=False)


def role_budget(ctx, tokens: int | None) -> int:
    """A role's token budget: its own setting, or ``rollout.max_new_tokens`` when that is None."""
    return tokens if tokens is not None else ctx.config.rollout.max_new_tokens


def document_body(doc, tokenizer, max_tokens: int) -> str:
    """A document as the Challenger and the gate's reader see it: its title, then whole passages up to the budget."""
    body = document_text(doc, tokenizer, max_tokens)
    return f"Title: {doc.title}\n\n{body}" if doc.title else body


def challenger_prompt(tokenizer, doc, sec) -> list[int]:
    """Turn one's prompt: the document (whole passages up to the token budget) and the format question."""
    body = document_body(doc, tokenizer, sec.max_document_tokens)
    return chat(tokenizer, None, format_prompt(f"[BEGINNING OF THE DOCUMENT]\n{body}\n[END OF THE DOCUMENT]",
                                               sec.formats, sec.answer_types)) + prefill_ids(tokenizer, FORMAT_PREFILL)


def task_prefill(fmt: str, sec) -> str:
    """What opens the task turn: nothing when the Challenger thinks first, else the start of its JSON."""
    return "" if sec.think_before_task else TASK_PREFILL[fmt]


def prefill_ids(tokenizer, text: str) -> list[int]:
    """The tokens opening an assistant turn (spice_tasks FORMAT_PREFILL / TASK_PREFILL)."""
    return tokenizer.encode(text, add_special_tokens=False)


def draw_numbers(docs) -> list[int]:
    """How many times each document was drawn before, in this step: [a, b, a] -> [0, 0, 1]."""
    seen: Counter = Counter()
    out = []
    for doc in docs:
        out.append(seen[doc.id])
        seen[doc.id] += 1
    return out


def challenge(ctx, docs, step: int, draws: list[int] | None = None) -> list[Attempt]:
    """Both Challenger turns for ``challenger_attempts`` conversations per document, batched.

    ``draws``: each document's draw number in the whole step (keys stay unique when the same
    document is drawn twice, also on different ranks); by default counted within ``docs``."""
    sec, tok = ctx.config.spice, ctx.policy.tokenizer
    gate_cfg = getattr(ctx.config, "gate", None)
    attempts, N = [], sec.challenger_attempts
    recall_rule = bool(getattr(gate_cfg, "recall", False))  # cross-play (no gate section): off
    draws = draw_numbers(docs) if draws is None else draws
    doc_texts = [doc.text for doc in docs]
    for d, doc in enumerate(docs):
        prompt = challenger_prompt(tok, doc, sec)
        first_i = draws[d] * N
        attempts += [Attempt(str(doc.id), doc.title, first_i + i, f"{step}:{doc.id}:{first_i + i}", list(prompt),
                             group=d) for i in range(N)]
    first = ctx.generator.generate([a.prompt_ids for a in attempts],
                                   ctx.sampling_params(max_new_tokens=sec.format_max_new_tokens))
    second, glue = [], {}  # glue: turn-two ids by (user turn, ended with EOS, format): a few distinct a step
    for a, c in zip(attempts, first):
        a.extend(c.completion_ids, c.logprobs, trained=True)
        a.truncated = c.finish_reason == "length"
        a.turns.append({"role": "assistant", "text": FORMAT_PREFILL + c.text})
        try:
            a.choice = parse_format_choice(FORMAT_PREFILL + c.text, sec.formats, sec.answer_types)
        except TaskError as err:
            a.reason = f"format: {err}"
            continue
        user = task_prompt(a.choice, sec.worked_example, sec.think_before_task, recall_rule)
        key = (user, c.finish_reason == "eos", a.choice.format)
        if key not in glue:
            glue[key] = continue_chat(tok, user, key[1]) + prefill_ids(tok, task_prefill(a.choice.format, sec))
        a.extend(glue[key], [], trained=False)
        a.turns.append({"role": "user", "text": user})
        second.append(a)
    outs = ctx.generator.generate([a.prompt_ids + a.completion_ids for a in second],
                                  ctx.sampling_params(max_new_tokens=role_budget(ctx, sec.task_max_new_tokens)))
    for a, c in zip(second, outs):
        a.extend(c.completion_ids, c.logprobs, trained=True)
        a.truncated = a.truncated or c.finish_reason == "length"
        text = task_prefill(a.choice.format, sec) + c.text
        a.turns.append({"role": "assistant", "text": text})
        try:
            a.task = parse_task(text, a.choice, sec.max_string_answer_words,
                                document=f"{a.doc_title}\n{doc_texts[a.group]}", require_grounding=sec.require_grounding,
                                max_copy_ratio=gate_cfg.copy_ratio if gate_cfg is not None else 1.0,
                                recall=recall_rule)
        except TaskError as err:
            a.reason = f"task: {err}"
            a.task = err.task  # a parsed task that broke a rule: invalid (it has a reason), its question on record
            continue
        if a.task.format == "mcq":
            a.written_letter = a.task.answer
            if gate_cfg.shuffle_options if gate_cfg is not None else True:  # cross-play (no gate section): shuffled
                shuffle(a, getattr(ctx.config, "seed", 0))
    return attempts


def shuffle(a: Attempt, seed) -> None:
    """The task gate's option shuffle for a parsed MCQ (``gate.shuffle_options``): the Reasoner, the guess probe and
    the reader see the options in a random order and are graded against the moved letter; the Challenger's own
    tokens (its JSON) stay as written and ``a.written_letter`` keeps its letter (``mcq_letter_share_max``). An MCQ
    whose options cannot be told apart is invalid (``gate.OPTIONS_UNCLEAR``): left as written, it would keep its
    letter's place. The order is drawn from ``seed`` (the run's) and the question as written, compared as
    ``mark_repeated`` compares questions (``gate.question_key``), so one question written twice (for two documents,
    or in two steps) reads the same both times: the rules that compare question texts (``mark_repeated``, a
    reviewer's flag, template clusters) see it as one, as they did before the shuffle."""
    a.written_letter = a.task.answer
    moved = shuffle_options(a.task.question, a.task.answer, random.Random(f"{seed}:{question_key(a.task.question)}"))
    if moved is None:
        a.reason = f"task: {OPTIONS_UNCLEAR}"
    else:
        a.task = SpiceTask("mcq", "mcq", moved[0], moved[1])


def ask(ctx, attempts: list[Attempt], user_texts: list[str], k: int, max_new_tokens: int):
    """``k`` answers to each attempt's user prompt (the Reasoner's system prompt), in one generate call, graded
    against the attempt's gold: (completions, verdicts), ``k`` of each per attempt, in order."""
    tok = ctx.policy.tokenizer
    prompts = [list(ids) for text in user_texts for ids in [chat(tok, REASONER_SYSTEM, text)] * k]  # tokenized once
    outs = ctx.generator.generate(prompts, ctx.sampling_params(max_new_tokens=max_new_tokens))
    verdicts = grade([(a.task, c.text) for i, a in enumerate(attempts) for c in outs[i * k:(i + 1) * k]])
    return ([outs[i * k:(i + 1) * k] for i in range(len(attempts))],
            [verdicts[i * k:(i + 1) * k] for i in range(len(attempts))])


def answer(ctx, attempts: list[Attempt]) -> None:
    """``rollout.group_size`` Reasoner answers for each attempt, graded against its gold."""
    outs, verdicts = ask(ctx, attempts, [reasoner_prompt(a.task) for a in attempts], ctx.config.rollout.group_size,
                         role_budget(ctx, ctx.config.spice.reasoner_max_new_tokens))
    for a, o, v in zip(attempts, outs, verdicts):
        a.answers, a.correct, a.graded = o, v, list(v)


def guess(ctx, attempts: list[Attempt]) -> None:
    """The task gate's guess probe: ``rollout.group_size`` Reasoner answers per task within
    ``gate.guess_max_new_tokens`` tokens, told to answer at once (no room to reason); verdicts in ``a.guessed``."""
    if not attempts:
        return
    _, verdicts = ask(ctx, attempts, [reasoner_prompt(a.task) + GUESS_PROMPT_SUFFIX for a in attempts],
                      ctx.config.rollout.group_size, ctx.config.gate.guess_max_new_tokens)
    for a, v in zip(attempts, verdicts):
        a.guessed = v


def read(ctx, attempts: list[Attempt], docs) -> None:
    """The task gate's consensus label: a reader that sees the task's document (``docs[a.group]``) answers it
    ``gate.consensus_samples`` times; verdicts against the Challenger's answer in ``a.agrees``."""
    n, tok, sec = ctx.config.gate.consensus_samples, ctx.policy.tokenizer, ctx.config.spice
    if not attempts or n == 0:
        return
    texts = [reader_prompt(document_body(docs[a.group], tok, sec.max_document_tokens), reasoner_prompt(a.task))
             for a in attempts]
    _, verdicts = ask(ctx, attempts, texts, n, ctx.config.gate.consensus_max_new_tokens)
    for a, v in zip(attempts, verdicts):
        a.agrees = v
