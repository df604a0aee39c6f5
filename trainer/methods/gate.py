"""The task gate: what a task written by a model must pass before it trains anyone.

Every role that writes tasks (SPICE's Challenger, SSP's Proposer, SCOPE's Challenger, pi-Play's Examiner) sends
its tasks through these rules; a task that fails one is invalid, its reason ("task: <rule text> (...)") stored with
it, and each rule's share of a step's tasks is a metric ``gate_<rule>_rate``. Self-play collapses into task families
a solver can answer without reading (SPICE on Qwen2.5-Coder-1.5B: "How many paragraphs are there in the given
text?" -> 1, then "How many correct answers?" -> 1, then answers 1 or 2 on 94 of 96 documents); a strict admission
gate is what kept training stable in every reward variant of "Survive or Collapse" (arXiv 2605.22217).

Rules that need no model (``check_task``, ``python -m trainer gate`` without --model):
- ``answer_in_question``: the question states its own answer (``parts.answer_in_question``);
- ``no_words``: fewer than 3 words holding a letter;
- ``refers_to_document``: "the text", "the passage", "as mentioned" (the solver never sees it);
- ``not_grounded``: no content word (name, term, number) in common with the document;
- ``copy_ratio``: more than ``gate.copy_ratio`` of the question's character 6-grams appear in the document
  (DARC, arXiv 2601.13761: 0.8): a sentence of the document turned into a question is a lookup;
- ``copies_example``: the question restates an example question of its writer's prompt (SSP:
  ``copies_prompt_example``, more than ``gate.example_copy_ratio`` of its 6-grams; SPICE: its own
  ``spice_tasks.copies_example``, which also catches rewordings of its worked examples).
Rules over a step's tasks (training only):
- ``repeated``: one question written for several documents; ``repeated_answer``: one answer for many documents
  (``mark_repeated`` / ``mark_repeated_answers``);
- template clusters (``template_clusters``): near-identical question templates, names and numbers masked, are
  clustered (word-bigram Jaccard >= ``gate.template_similarity``) and each valid task's writer reward loses its
  cluster's share of the step's valid tasks (R-Zero, arXiv 2508.05004: BLEU distance 0.5, reward minus |C|/B).
Rules that need the model (``needs_model``):
- ``consensus``: a reader that sees the document answers the question ``gate.consensus_samples`` times; the task
  is valid only if a strict majority agrees with the writer's answer (DARC's and SSP's label check);
- ``guessable``: a guess probe (the solver answering with ``gate.guess_max_new_tokens`` tokens, no room to reason)
  passes at least as often as the full solver: the task tests no reasoning. Pass rates are compared after
  ``chance_corrected`` (a 4-option MCQ is passed 1/4 of the time by a blind guess, yes/no 1/2).
Before any solver reads an MCQ, its four options are put in a random order and its gold letter moved with its option
(``shuffle_options``, ``gate.shuffle_options``): a writer that always puts the right option first would otherwise
teach the solver a letter. An MCQ whose options cannot be told apart is invalid then (``options``: not four labels A)
to D) in order), or it would keep its written order.
Penalties follow the anchors (Absolute Zero -1 for a format error, SPELL -0.5 for a refused task): an output that
does not parse costs ``gate.format_penalty`` (-1), a task refused by a rule ``gate.rule_penalty`` (-0.5).

The cross-document rules take the writers' attempts by their fields (doc_id, task, valid, reason) and tasks by
(question, answer, format): this module imports no recipe.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.methods.parts import answer_in_question, count_words
from trainer.tools.bm25 import STOPWORDS
from trainer.verify import normalize_answer, plain_number

ANSWER_IN_QUESTION = "answer in question"
NO_WORDS = "question has no words"
REFERS_TO_DOCUMENT = "question refers to the document"
NOT_GROUNDED = "question is not about the document"
MIN_QUESTION_WORDS = 3
# The paper's Challenger prompts (spice.txt, CRITICAL rules): 'Never reference "the document" or "the text" in the
# question'; 'NEVER use: "according to the text", "in the document", "as mentioned", "the passage states"'. The
# Reasoner never sees the document, so such a question cannot be answered as asked.
_DOCUMENT_WORDS = r"(?:text|document|passage|article|paragraph|excerpt)s?(?!\s+of\b)"  # "the text of the treaty" stands alone
_REFERS_TO_DOCUMENT = re.compile(
    rf"\b(?:the|this|that|these|given|provided|above|following|preceding)\s+(?:(?:given|provided|above|original|"
    rf"following|preceding)\s+)?{_DOCUMENT_WORDS}\b|\bas (?:mentioned|stated|described)\b", re.IGNORECASE)


# Words any question may use whatever its document ("How many correct answers?"), beyond the BM25 stop words (what,
# which, who, is, ...): neither grounds anything.
_TASK_WORDS = frozenset("""
how many much whose does did do done been being can could should may might must not also more most less least than
other another each every any all some only about after before during between here those answer answers answered
answering question questions correct incorrect right wrong true false option options choice choices way ways number
numbers total following given provided above below mentioned stated described based according name named called one
two three four five six seven eight nine ten first second third last type types kind kinds part parts
""".split())
_NOT_CONTENT = STOPWORDS | _TASK_WORDS
_GROUND_TOKEN = re.compile(r"[a-z]+|\d[\d,.]*\d")
MIN_GROUNDABLE_WORDS = 5  # a document with fewer Latin-script content words (another script) is not checked


def content_words(text: str) -> set[str]:
    """The words of ``text`` that can tie a question to a document: lower-cased Latin-script words of 3+ letters,
    minus stop words and question words (``_NOT_CONTENT``), a plural's final "s" dropped; and numbers of 2+ digits
    (thousands commas dropped). "How many ships did Venice send in 1453?" -> {ship, venice, send, 1453}."""
    out = set()
    for t in _GROUND_TOKEN.findall((text or "").lower()):
        if t[0].isdigit():
            t = t.replace(",", "").rstrip(".")
            if len(t) >= 2:
                out.add(t)
        elif len(t) >= 3 and t not in _NOT_CONTENT:
            out.add(t[:-1] if len(t) > 3 and t.endswith("s") and not t.endswith("ss") else t)
    return out


def grounded(question: str, document: str) -> bool:
    """Does the question share a content word with its document (``content_words``)? True when the document has too
    few Latin-script words to tell. On the GPU runs' held-out tasks: 92 of the base 1.5B Challenger's 96 questions
    and all 128 math questions are grounded; none of the collapsed Challengers' ("How many correct answers?",
    digit strings) are."""
    doc = content_words(document)
    return len(doc) < MIN_GROUNDABLE_WORDS or bool(content_words(question) & doc)


def refers_to_document(question: str) -> bool:
    """Does the question point at the document the Reasoner never sees? ("How many paragraphs are there in the
    given text?", "according to the passage", "as mentioned") - the paper's prompt forbids it."""
    return bool(_REFERS_TO_DOCUMENT.search(question))


REPEATED = "question repeated across documents"
REPEATED_ANSWER = "answer repeated across documents"


def question_key(question: str) -> str:
    """What ``mark_repeated`` compares (and what seeds an MCQ's option order): lower case, every character other than
    a letter, digit, "_" or space made a space ("What’s" and "What's", "1990-91" and "1990 91" are one key). Not
    ``verify.normalize_answer`` (the graders'): it deletes ASCII punctuation only (joining "1990-91" into "199091"),
    keeps typographic quotes and drops articles."""
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
    return _mark_across_documents(attempts, lambda task: question_key(task.question), REPEATED,
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


# ---- rules of one task that need no model ---------------------------------------------------------------------

COPIES_DOCUMENT = "question copies its document"
GUESSABLE = "task is guessable"
NO_CONSENSUS = "reader with the document disagrees"
OPTIONS_UNCLEAR = "options are not four labelled A) to D) in order"
RECALL = "question asks for a number it gives nothing to work out from"
# Every rule by its metric name (gate_<name>_rate) and the text its reason starts with ("task: <text> (...)").
RULES = {"answer_in_question": ANSWER_IN_QUESTION, "no_words": NO_WORDS, "refers_to_document": REFERS_TO_DOCUMENT,
         "not_grounded": NOT_GROUNDED, "copy_ratio": COPIES_DOCUMENT, "repeated": REPEATED,
         "repeated_answer": REPEATED_ANSWER, "options": OPTIONS_UNCLEAR, "recall": RECALL, "consensus": NO_CONSENSUS,
         "guessable": GUESSABLE}
NEEDS_MODEL = ("consensus", "guessable")
ACROSS_TASKS = ("repeated", "repeated_answer")


@dataclass(frozen=True)
class GateTask:
    """What the gate reads of a task: the question, the writer's answer, the document it was written from, and
    its format ("mcq" | "free_form") and answer type ("integer", "string", "boolean", ...; "mcq" for an MCQ)."""

    question: str
    answer: str
    document: str | None = None
    format: str = "free_form"
    answer_type: str | None = None


def _grams(text: str, n: int = 6) -> set[str]:
    t = " ".join((text or "").lower().split())
    return {t[i:i + n] for i in range(len(t) - n + 1)}


def copy_ratio(question: str, document: str, n: int = 6) -> float:
    """Share of the question's character ``n``-grams (lower case, whitespace squeezed) found in the document
    (DARC's copy check). "Which river flows through Vienna?" against a document holding "The Danube flows through
    Vienna" shares its 6-grams from "river" on only: about 0.5; a document sentence with "What" put in front: ~0.9.
    0 for a question shorter than ``n`` characters."""
    q = _grams(question, n)
    return len(q & _grams(document, n)) / len(q) if q else 0.0


def copies_prompt_example(question: str, examples: Sequence[str], limit: float = 0.5) -> bool:
    """Does ``question`` restate one of the example questions of its writer's own prompt? More than ``limit`` of
    its character 6-grams found in one example (``copy_ratio``). SSP's 1.5B Proposer wrote "Which river flows through
    the city where Mozart composed his unfinished Requiem mass?" (its prompt's example, word for word) for the
    answers "Documentary film" and "Amusement park": 38 of the 99 questions that passed SSP's rule filter in the
    first 9 steps of run sg (2026-11-28) shared more than half their 6-grams with the prompt. An example shows the
    form of a reply, not its content; a copy is not written from the writer's answer or its search results."""
    return any(copy_ratio(question, ex) > limit for ex in examples if ex)


NUMERIC_ANSWER_TYPES = ("integer", "float")
# numbers a question can give in words ("one" is left out: a pronoun as often as not; so are the scales hundred,
# thousand, million: "How many million km2 does Niger cover?" gives no number)
_NUMBER_WORDS = frozenset("""zero two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety dozen dozens half twice
double triple thrice""".split())
_WORDS = re.compile(r"[^\W\d_]+")  # whole words, accented ones too: "Ténéré" is not "ten"
_DIGIT = re.compile(r"\d")  # decimal digits of any script ("١٨"); not "²" or "½" ("km²" gives no number)


def asks_recall(question: str, answer_type: str | None, answer: str | None = None) -> bool:
    """A numeric task (an integer or float answer, or an answer that is a plain number whatever its declared type)
    whose question holds no number, in digits or in words: its solver, who never sees the document, can only recall
    the number, not work it out. "How many districts does Warsaw have?" -> 18 and "In which year did the Battle of
    Vienna take place?" -> 1683 are; "How many years after the Russo-Turkish War of 1877-1878 did the Congress of
    Berlin meet?" is not (it gives a number), nor a task with a string answer. SPICE's free-form prompt asks to
    "include all necessary context and definitions" and to avoid "direct lookups or single-fact answers"
    (spice.txt, Figure 10). The last Challengers of three Qwen2.5-Coder-1.5B SPICE runs wrote 53 such tasks among
    their 129 free-form tasks on held-out documents (the base Reasoner solved 8% of them, 15.5% of the rest); the
    base Challenger 27 of 59. "one" is not a number here (a pronoun as often as not)."""
    if (answer_type or "").lower() not in NUMERIC_ANSWER_TYPES and (answer is None or plain_number(str(answer)) is None):
        return False
    q = question or ""
    return not _DIGIT.search(q) and not (_NUMBER_WORDS & set(_WORDS.findall(q.lower())))


def task_failures(task: GateTask, *, max_copy_ratio: float = 0.8, require_grounding: bool = True,
                  min_words: int = MIN_QUESTION_WORDS, whole_words: bool = True,
                  recall: bool = False) -> list[tuple[str, str]]:
    """Every per-task rule ``task`` breaks, in order, as (rule name, reason "<rule text>: <detail>").

    answer in question (not for an MCQ's letter or a boolean's true/false: choices among given options, never a
    copy; ``whole_words`` False = SSP's substring check), no words (an MCQ's option labels A) to D) are no words),
    refers to the document, and with a document: not grounded (``require_grounding``) and copies its document
    (``max_copy_ratio``; 1 = off); with ``recall``, a numeric task whose question gives no number (``asks_recall``)."""
    q, out = task.question or "", []
    if (task.format != "mcq" and task.answer_type != "boolean"
            and answer_in_question(q, task.answer, whole_words=whole_words)):
        out.append(("answer_in_question", f"{ANSWER_IN_QUESTION}: the solver could copy it"))
    if count_words(_OPTION_LABEL.sub(" ", q) if task.format == "mcq" else q) < min_words:
        out.append(("no_words", f"{NO_WORDS} (fewer than {min_words} words with letters)"))
    if refers_to_document(q):
        out.append(("refers_to_document", f"{REFERS_TO_DOCUMENT}, which the solver never sees"))
    if task.document is not None:
        if require_grounding and not grounded(q, task.document):
            out.append(("not_grounded", f"{NOT_GROUNDED}: it shares no name, term or number with it"))
        if max_copy_ratio < 1:
            ratio = copy_ratio(q, task.document)
            if ratio > max_copy_ratio:
                out.append(("copy_ratio", f"{COPIES_DOCUMENT} ({ratio:.0%} of its character 6-grams, more than "
                                          f"{max_copy_ratio:.0%})"))
    if recall and task.format != "mcq" and asks_recall(q, task.answer_type, task.answer):
        out.append(("recall", f"{RECALL}: the solver never sees the document, so it can only recall the "
                              "number"))
    return out


def check_task(task: GateTask, **rules) -> str | None:
    """The reason of the first per-task rule ``task`` breaks (``task_failures``), or None when it passes."""
    failures = task_failures(task, **rules)
    return failures[0][1] if failures else None


_OPTION_LABEL = re.compile(r"(?:^|[\s(\[])[A-D]\s*[).:]")


# ---- template clusters ---------------------------------------------------------------------------------------

_TEMPLATE_TOKEN = re.compile(r"[A-Za-z][\w'’-]*|\d[\d,.]*")


def template(question: str) -> tuple[str, ...]:
    """A question's template: lower-cased words, numbers made "<n>" and capitalised words past the first made "<e>"
    (names), runs of masks joined. "How many continents does Niger lie on?" -> (how, many, continents, does, <e>,
    lie, on)."""
    out: list[str] = []
    for i, tok in enumerate(_TEMPLATE_TOKEN.findall(question or "")):
        word = "<n>" if tok[0].isdigit() else "<e>" if i > 0 and tok[0].isupper() else tok.lower()
        if not (word in ("<n>", "<e>") and out and out[-1] == word):
            out.append(word)
    return tuple(out)


def _bigrams(words: tuple[str, ...]) -> frozenset:
    padded = ("<s>", *words, "</s>")
    return frozenset(zip(padded, padded[1:]))


def template_clusters(questions: Sequence[str], similarity: float = 0.5) -> list[int]:
    """Cluster id of each question: two questions whose templates' word bigrams (with start and end marks) have a
    Jaccard similarity of at least ``similarity`` share a cluster, and clusters chain (single linkage).

    R-Zero clusters by BLEU distance < 0.5; bigram Jaccard over templates is the cheaper equivalent that joins the
    same families: "How many continents does Niger lie on?" and "How many continents does Chad lie on?" have one
    template (8 of 8 bigrams), "How many paragraphs are there in the given text?" and "How many paragraphs are in the
    text?" share 6 of 12 (0.5); "How many continents does Niger lie on?" and "How many sides did the
    Polish-Lithuanian Commonwealth have?" share 2 of 14 ("<s> how", "how many"), and are apart."""
    grams = [_bigrams(template(q)) for q in questions]
    parent = list(range(len(questions)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_gram: dict = {}
    for i, g in enumerate(grams):  # only pairs sharing a bigram other than the opening are compared
        for b in g:
            if b[0] != "<s>":
                by_gram.setdefault(b, []).append(i)
    for i, g in enumerate(grams):
        seen = {j for b in g if b[0] != "<s>" for j in by_gram[b] if j > i}
        for j in seen:
            union = len(g | grams[j])
            if union and len(g & grams[j]) / union >= similarity:
                parent[root(j)] = root(i)
    return [root(i) for i in range(len(questions))]


def cluster_shares(cluster_ids: Sequence[int]) -> list[float]:
    """Each item's cluster's share of all items (R-Zero's |C|/B): [0, 0, 1, 0] -> [0.75, 0.75, 0.25, 0.75]."""
    sizes = Counter(cluster_ids)
    return [sizes[c] / len(cluster_ids) for c in cluster_ids]


def template_penalty(reward: float, share: float) -> float:
    """R-Zero's repetition penalty on a valid task's writer reward: max(0, reward - share)."""
    return max(0.0, reward - share)


# ---- rules that need the model: chance correction, the guess probe, the consensus label ------------------------

def chance_level(fmt: str, answer_type: str | None) -> float:
    """What a blind guess scores: 1/4 for a 4-option MCQ, 1/2 for a yes/no (boolean) task, 0 otherwise."""
    if fmt == "mcq":
        return 0.25
    return 0.5 if answer_type == "boolean" else 0.0


def chance_corrected(p: float, chance: float) -> float:
    """(p - c) / (1 - c), floored at 0: a pass rate with blind guessing taken out. MCQ (c = 1/4): 0.25 -> 0,
    0.625 -> 0.5, 1 -> 1; yes/no (c = 1/2): 0.5 -> 0, 0.75 -> 0.5; free-form (c = 0): unchanged."""
    if chance <= 0:
        return p
    return max(0.0, (p - chance) / (1 - chance))


def guessable(guess_rate: float, full_rate: float, chance: float = 0.0) -> bool:
    """Does the guess probe (no room to reason) pass the task at least as often as the full solver, above chance?
    Compared after ``chance_corrected``: 4/8 guessed vs 4/8 reasoned on a free-form task -> guessable; 2/8 vs 6/8
    -> not; an MCQ guessed 2/8 (chance) and reasoned 2/8 -> not (it is hard, not guessable); a task neither passes
    -> not guessable."""
    g, f = chance_corrected(guess_rate, chance), chance_corrected(full_rate, chance)
    return g > 0 and g >= f


def consensus(agrees: Sequence[bool]) -> bool:
    """Does a strict majority of the reader's answers (with the document) agree with the writer's answer?
    [T, T, F] -> True; [T, F] -> False; [] -> False."""
    return 2 * sum(agrees) > len(agrees)


GUESS_PROMPT_SUFFIX = ("\n\nAnswer at once: reply with only the final answer within \\boxed{}, "
                       "no explanation.")
READER_PROMPT = """Read the document, then answer the question after it from what the document says.

[BEGINNING OF THE DOCUMENT]
{document}
[END OF THE DOCUMENT]

{question}"""


def reader_prompt(document: str, question_prompt: str) -> str:
    """The consensus reader's prompt: the document, then the solver's own prompt for the question."""
    return READER_PROMPT.format(document=document, question=question_prompt)


# ---- MCQ option order ----------------------------------------------------------------------------------------

MCQ_LETTERS = ("A", "B", "C", "D")
_LABEL_AT = re.compile(r"(?:^|(?<=[\s(\[]))([A-H])\s*[).:]")  # E) to H): more than four options


def option_spans(question: str) -> tuple[str, list[tuple[str, str]], list[str]] | None:
    """An MCQ question split at its option labels A) to D) (also "(A)", "A.", "A:"): (stem, [(label, option text)] x 4,
    [the whitespace after each option]); None when no kind of label gives four options in order (the caller leaves
    the question as written, or refuses it: ``OPTIONS_UNCLEAR``). Labels are read one punctuation at a time, ")"
    first, then ".", then ":", so an option that itself holds "Class A:" or "Washington, D.C." is not split there."""
    for mark in ")" ".:":
        parts = _options_marked(question, mark)
        if parts is not None:
            return parts
    return None


def _options_marked(question: str, mark: str):
    """``option_spans`` for labels ending in ``mark``: A to D once each and in order from the last "A" label on."""
    labels = [m for m in _LABEL_AT.finditer(question) if m.group(0)[-1] == mark]
    starts = [i for i, m in enumerate(labels) if m.group(1) == "A"]
    if not starts:
        return None
    spans = []
    for m in labels[starts[-1]:]:
        if spans and m.group(1) == MCQ_LETTERS[len(spans) - 1] and not question[spans[-1][1]:m.start()].strip():
            spans[-1] = (spans[-1][0], m.end())  # a doubled label, "A) A) 10 cows": one label
            continue
        if len(spans) == 4 or m.group(1) != MCQ_LETTERS[len(spans)]:
            return None  # a fifth label, one out of order or repeated: not four options in order
        opener = m.start() > 0 and question[m.start() - 1] in "(["  # "(B)": the bracket belongs to the label
        spans.append((m.start() - opener, m.end()))
    if len(spans) != 4:
        return None
    options, gaps = [], []
    for i, (start, end) in enumerate(spans):
        body = question[end:spans[i + 1][0] if i < 3 else len(question)]
        if not body.strip():
            return None
        options.append((question[start:end], body.strip()))
        gaps.append(body[len(body.rstrip()):])
    return question[:spans[0][0]], options, gaps


def shuffle_options(question: str, letter: str, rng) -> tuple[str, str] | None:
    """The MCQ with its four options in a random order (``rng``: a ``random.Random``) and its gold letter moved with
    its option: (question, letter). Labels, spacing and the stem stay where they were; only the options' texts move.
    None when the options cannot be told apart (``option_spans``) or the letter is not A to D.

    Why (ours, not in the papers): a writer that always puts the right option first teaches the solver to answer
    "A" without reading. Qwen2.5-Coder-1.5B's SPICE Challenger drifted there within 19 steps on an H200 (61 of its
    63 held-out MCQs answered A; the Reasoner's pass rate on them 82%, the base's 40%). With the options shuffled
    before any solver reads them, no position carries the answer."""
    parts = option_spans(question)
    if parts is None or letter not in MCQ_LETTERS:
        return None
    stem, options, gaps = parts
    order = list(range(4))
    rng.shuffle(order)
    out = stem
    for pos, src in enumerate(order):
        out += options[pos][0] + " " + options[src][1] + gaps[pos]  # position pos keeps its label, takes src's text
    return out, MCQ_LETTERS[order.index(MCQ_LETTERS.index(letter))]


# ---- metrics -------------------------------------------------------------------------------------------------

def rule_of(reason: str) -> str | None:
    """The RULES name of a stored reason ("task: question copies its document (91% ...)" -> "copy_ratio")."""
    text = reason.split("task: ", 1)[-1] if reason else ""
    for name, start in RULES.items():
        if text.startswith(start):
            return name
    return None


def gate_metrics(reasons: Sequence[str], answers: Sequence[str | None], cluster_ids: Sequence[int]) -> dict:
    """A step's gate metrics: ``gate_<rule>_rate`` for every rule (share of all tasks written), ``answer_share_max``
    (the most frequent answer's share of the valid free-form tasks, normalized as the graders compare) and
    ``template_cluster_max`` (the largest template cluster's share of the valid tasks)."""
    n = max(len(reasons), 1)
    named = Counter(rule_of(r) for r in reasons if r)
    return {**{f"gate_{name}_rate": named.get(name, 0) / n for name in RULES}, **family_shares(answers, cluster_ids)}


def family_shares(answers: Sequence[str | None], cluster_ids: Sequence[int]) -> dict:
    """How far a step's valid tasks concentrate on one family: ``answer_share_max`` (the most frequent answer's share,
    normalized as the graders compare) and ``template_cluster_max`` (the largest template cluster's share)."""
    return {"answer_share_max": largest_share([normalize_answer(a) for a in answers if a]),
            "template_cluster_max": largest_share(cluster_ids)}


def largest_share(values: Sequence) -> float:
    """The most frequent value's share of ``values`` (0.0 for none): an answer, a cluster id, an MCQ's letter."""
    return max(Counter(values).values()) / len(values) if values else 0.0
