"""SPICE's rules that look at a whole step's tasks across its documents (training only; the per-task rules are
in spice_tasks.py, ``parse_task`` / ``check_standalone``): a question written for several documents
(``mark_repeated``) or an answer given for many of them (``mark_repeated_answers``) is about none of them, and a
Reasoner can answer it without reading. Both are called on the step's attempts so far after each retry round and
mark tasks invalid in place ("task: <reason> (<detail>)"); why each exists, with the GPU runs' numbers, is in
their docstrings and in the recipe's departures (trainer/methods/spice.py). They take spice_tasks' ``Attempt``s
(doc_id, task, valid, reason) and ``SpiceTask``s (question, answer, format) without importing that module,
which imports this one.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from trainer.verify import normalize_answer, plain_number

REPEATED = "question repeated across documents"
REPEATED_ANSWER = "answer repeated across documents"


def _question_key(question: str) -> str:
    """What ``mark_repeated`` compares: lower case, every character other than a letter, digit, "_" or space made a
    space ("What’s" and "What's", "1990-91" and "1990 91" are one key). Not ``verify.normalize_answer`` (the
    graders'): it deletes ASCII punctuation only (joining "1990-91" into "199091"), keeps typographic quotes and
    drops articles."""
    return " ".join(re.sub(r"[^\w\s]", " ", question.lower()).split())


def _mark_across_documents(attempts: Sequence, key, reason: str, repeated) -> int:
    """Shared by ``mark_repeated`` and ``mark_repeated_answers``: groups the step's live tasks by ``key(task)`` across
    documents and makes every valid task of a group that ``repeated`` names invalid, "task: {reason} ({detail})".
    Returns how many are marked.

    Live: a task that is valid, or already marked with ``reason`` (it keeps counting, so a task keeps its mark when
    later retry rounds add more copies); a task whose key is None is left out. ``repeated(docs)`` gets the group's
    documents, each with its weight in the group: a document weighs 1 in all, split evenly over its live tasks (so
    its 8 attempts count as one document, never as 8), and returns the mark's detail, or None for no mark."""
    live = [(a, k) for a in attempts if a.task is not None and (a.valid or a.reason.startswith(f"task: {reason}"))
            for k in [key(a.task)] if k is not None]
    tasks_of = Counter(a.doc_id for a, _ in live)
    groups: dict = {}
    for a, k in live:
        groups.setdefault(k, Counter())[a.doc_id] += 1 / tasks_of[a.doc_id]
    details = {k: repeated(docs) for k, docs in groups.items()}
    marked = 0
    for a, k in live:
        if a.valid and details[k]:
            a.reason = f"task: {reason} ({details[k]})"
            marked += 1
    return marked


def mark_repeated(attempts: Sequence) -> int:
    """A question written for two or more different documents is about none of them: every such task (compared
    case- and punctuation-blind) becomes invalid, "question repeated across documents". Returns how many are marked.
    A collapsed Challenger writes one template for every document ("How many correct answers?" for 96 of 96 held-out
    documents); the same document drawn twice in a step may repeat its own question. Called on the step's attempts so
    far after each retry round, so a task keeps its mark when later rounds add more copies."""
    return _mark_across_documents(attempts, lambda task: _question_key(task.question), REPEATED,
                                  lambda docs: f"{len(docs)} documents" if len(docs) > 1 else None)


def _answer_key(task):
    """What ``mark_repeated_answers`` compares, as the graders compare answers: an answer that is a plain number by its
    value (``verify.plain_number``, which ``math_equal`` compares first: "1" = "1.0" = "01", "1,000" = "1000"; a float
    rounded to 6 significant digits, about ``same_number``'s 1e-6), anything else by ``verify.normalize_answer``
    (``exact_match``'s: "The Danube." = "danube"). None for an MCQ: its letter is one of four by design. Expressions
    equal only by algebra ("2x + 5", "5 + 2x") stay apart (no sympy here)."""
    if task.format == "mcq":
        return None
    value = plain_number(task.answer)
    if value is None:
        return normalize_answer(task.answer)
    if isinstance(value, float):
        value = float(f"{value:.6g}")
        value = int(value) if value.is_integer() else value
    return value


MIN_ANSWER_DOCUMENTS = 3  # an answer shared by two documents is never "repeated across documents"


def mark_repeated_answers(attempts: Sequence, max_share: float = 0.25) -> int:
    """A free-form answer the step's Challenger gives for more than ``max_share`` of the step's documents, and for at
    least ``MIN_ANSWER_DOCUMENTS`` different ones, can be guessed without reading: every valid task with that answer
    (``_answer_key``: numbers by value) becomes invalid, "answer repeated across documents". Returns how many are
    marked. ``max_share`` 1.0 marks nothing (``spice.max_answer_share``).

    A document counts once, split evenly over the answers of its valid free-form tasks (``_mark_across_documents``):
    the answer's share is the pass rate a Reasoner gets by always giving it, on a random valid free-form task of a
    random document of the step (the step's documents: every document with an attempt; one without a valid free-form
    task is a miss). One document answering "1" in all 8 attempts is one document; 3 of its 8 are 3/8 of one. Counting a
    document whole as soon as one attempt gives the answer flags a healthy Challenger: on the first steps of the 1.5B
    runs (16 documents x 8 attempts) small counts ("3", "4") already reach 4 of 16 documents, and of 16-document steps
    drawn from those steps' 58 documents 60% would mark something (7.4% of the valid free-form tasks), against none
    with the split (benchmarks/spice_answer_rule.py).
    MCQ tasks are exempt (letters repeat by design); booleans are not (a Challenger writing true/false tasks for
    most documents is the same guess). With every other rule in force, Qwen2.5-Coder-1.5B's Challenger collapsed
    within 37 steps to integer tasks grounded in a name of the document and worded differently each time ("How many
    continents does Niger lie on? -> 1", "How many sides did the Polish-Lithuanian Commonwealth have? -> 2"): answers
    1 and 2 on 94 of its 96 held-out documents, and its Reasoner learned to guess them (63.5%). Training only, like
    ``mark_repeated``: called after each retry round on the step's attempts so far (a mark stays). So a later
    round's answer can invalidate tasks of documents that were already done, which then end the step without a
    valid task: intended, it is what a collapsing step looks like."""
    if max_share >= 1:
        return 0
    n = len({a.doc_id for a in attempts})

    def repeated(docs: Counter) -> str | None:
        share = sum(docs.values())
        if len(docs) >= MIN_ANSWER_DOCUMENTS and share > max_share * n + 1e-9:  # 1e-9: 1/3 + 1/3 + 1/3 is not > 1
            return f"{len(docs)} documents, {share / n:.0%} of the step's {n}"
        return None

    return _mark_across_documents(attempts, _answer_key, REPEATED_ANSWER, repeated)
