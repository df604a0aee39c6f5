"""SSP's prompts, rule filter, RAG noise mixing and answer sampling (pure functions).

Wording is ours, structure is the paper's (ssp.txt, Appendix D): the Proposer is told the
answer and the number of searches and works backwards from the answer, searching with
``<search>`` and ending with ``<question>``; ours, not the paper's: the Proposer's prompt shows the
shape of a whole reply (think, search, ..., question) for another answer, after run ssp15's
1.5B Proposer wrote no ``<question>`` (26%), searched never or once (34%) or wrote under 10 words
(25%) in 69 kept trajectories of 22 steps, and validated 3 questions; the Solver is the Search-R1 prompt ending with
``<answer>``; the RAG check asks for a short reasoning then ``Answer:`` (a reply without it is
judged whole, as in the reference code).

The rule filter follows the reference code (Alibaba-Quark/SSP, problem_extraction.py): a
question exists, 10-1000 characters, at least 10 words, the answer string is not in it
(case-insensitive; ours also ignores punctuation, articles and extra spaces on both sides, as the
exact-match reward does: ``parts.answer_in_question``, shared with SPICE's task check; it decided
as the reference's test on all 182 distinct questions of three SSP runs), the Proposer's
searches retrieved something, at least 2 searches, no query repeated. ``mix_noise`` adds
passages from the other Proposer trajectories of the batch to a Proposer's own passages, then
shuffles them (the reference adds whole trajectories' materials; ours: single passages,
``rag_noise_passages`` of them).
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainer.methods.parts import answer_in_question, count_words
from trainer.tools.retriever import Passage

PROPOSER_SYSTEM = """You are an expert question writer. You work backwards from a given answer to a hard \
question that a solver can only answer by making 'n' searches, one after the other. You are given the \
target answer and the number of searches n.

How to build the question:

1. Study the target. Look at the answer you are given and the number of searches n: the answer is where the \
solver must end up, and n is the length of the chain of facts that leads there.

2. Work backwards from the answer, one link at a time.
2.1. First link: do not search for the answer itself. Think of a closely related but distinct concept (an \
event, a person, a place, a property, a category it belongs to) and search for the fact that connects that \
concept to the answer. That fact is the step just before the answer (search n-1).
2.2. Next links: take the fact you just found as the new target and search for a fact that leads to it \
(search n-2), and so on.
2.3. Stop when the chain has n links. The first fact of the chain becomes the starting clue of the question.

3. Think inside <think> and </think> every time you get new information. When you need knowledge, search with \
<search> query </search>; the results come back between <information> and </information>. You may search as \
many times as you need. When you have what you need, give only the question inside <question> and \
</question>, for example: <question> xxx </question>.

Three example questions:
Question 1: Which river flows through the capital of the country where the inventor of the first practical \
telephone exchange switchboard was born?
Question 2: In what year did the architect of the tallest building completed in the 1930s in the city that \
hosted the 1932 Summer Olympics die?
Question 3: What is the name of the moon, discovered by the astronomer who also found the planet's rings, of \
the second-largest planet in the Solar System?

Rules:
1. Facts only: every step of the chain comes from what your searches returned, never from guesses.
2. No spoilers: the question gives away neither the answer nor the intermediate facts.
3. Searching is necessary: general knowledge alone must not be enough to answer.
4. Search count: solving the question takes exactly the number of searches asked for.
5. One answer: the question leads to a single, unambiguous answer; each clue is precise enough that no other \
answer fits."""

PROPOSER_USER = """The answer is: {answer}
Write a question that needs {n} searches.

The shape of your reply, shown for another answer (Danube) and 2 searches; your searches and question will differ:
<think> The Danube flows through Vienna. I search for a fact that leads to Vienna. </think>
<search> city where Mozart's Requiem was composed </search>
(the results come back here)
<think> Mozart composed it in Vienna. Now a clue that needs this fact: the river of that city. </think>
<search> river flowing through Vienna </search>
(the results come back here)
<think> The Danube flows through Vienna. The question names neither Vienna nor the Danube. </think>
<question> Which river flows through the city where Mozart composed his unfinished Requiem mass? </question>
Make exactly {n} searches, one <search> per turn, before the <question>.
When you have enough information, first check that the question meets every rule, above all that it is not \
too easy. Then give the final question inside <question> and </question>, for example: <question> Which \
surname was most common among the presidents of the university founded in the same year as the city's first \
railway station? </question>."""

SOLVER_SYSTEM = "You are a helpful and harmless assistant."

SOLVER_USER = """Answer the given question. Reason inside <think> and </think> first every time you get new \
information. After reasoning, if you lack some knowledge, you can call a search engine with <search> query \
</search> and it returns the top results between <information> and </information>. You can search as many \
times as you want. When you need no more information, give the answer inside <answer> and </answer> without \
explanations, for example <answer> Beijing </answer>. Question: {question}"""

RAG_PROMPT = """Answer the given question from the materials below. First reason very briefly (at most 50 \
words), then give your answer right after 'Answer:', without explanations.

Materials:
{materials}

Question: {question}"""


@dataclass(frozen=True)
class FilterResult:
    ok: bool
    reason: str  # "ok" or what failed (for the sink and the per-reason metrics)


FILTER_REASONS = ("no_question", "too_short", "too_long", "too_few_words", "contains_answer", "no_materials",
                  "too_few_searches", "duplicate_queries", "flagged", "copy_ratio", "copies_example")

# The example questions the Proposer's prompts show (the task gate refuses a question restating one:
# ``gate.copies_prompt_example``); each appears in PROPOSER_SYSTEM or PROPOSER_USER word for word.
PROPOSER_EXAMPLES = tuple(m.strip() for m in re.findall(
    r"(?:Question \d: |<question> )((?:Which|In what|What)[^<?]*\?)", PROPOSER_SYSTEM + "\n" + PROPOSER_USER))


def rule_filter(question: str | None, answer: str, queries: Sequence[str], n_passages: int, *,
                min_chars: int = 10, max_chars: int = 1000, min_words: int = 10,
                min_searches: int = 2) -> FilterResult:
    """The reference code's pre-RAG checks, in its order; the first failure is the reason."""
    q = (question or "").strip()
    if not q:
        return FilterResult(False, "no_question")
    if len(q) < min_chars:
        return FilterResult(False, "too_short")
    if len(q) > max_chars:
        return FilterResult(False, "too_long")
    if count_words(q, letters_only=False) < min_words:
        return FilterResult(False, "too_few_words")
    if answer_in_question(q, answer, whole_words=False):
        return FilterResult(False, "contains_answer")
    if n_passages == 0:
        return FilterResult(False, "no_materials")
    cleaned = [x.strip() for x in queries if x.strip()]
    if len(cleaned) < min_searches:
        return FilterResult(False, "too_few_searches")
    if len(cleaned) != len(set(cleaned)):
        return FilterResult(False, "duplicate_queries")
    return FilterResult(True, "ok")


def _passage_id(p: Passage) -> tuple[str, str]:
    return (p.chunk_id or p.document_id, p.text)


def unique_passages(passages: Sequence[Passage]) -> list[Passage]:
    """Passages in first-seen order, each chunk once (a trajectory often retrieves one chunk twice)."""
    seen, out = set(), []
    for p in passages:
        if _passage_id(p) not in seen:
            seen.add(_passage_id(p))
            out.append(p)
    return out


def mix_noise(own: Sequence[Passage], others: Sequence[Sequence[Passage]], k: int,
              rng: random.Random) -> tuple[list[Passage], list[Passage]]:
    """(materials, noise): the Proposer's own passages plus ``k`` passages drawn from the OTHER
    trajectories of the batch that it did not retrieve itself, shuffled together.

    Fewer than ``k`` candidates: all of them are used.
    """
    mine = unique_passages(own)
    mine_ids = {_passage_id(p) for p in mine}
    pool = unique_passages([p for traj in others for p in traj if _passage_id(p) not in mine_ids])
    noise = rng.sample(pool, min(k, len(pool)))
    materials = mine + noise
    rng.shuffle(materials)
    return materials, noise


def fit_materials(materials: Sequence[Passage], noise: Sequence[Passage], n_tokens,
                  budget: int) -> tuple[list[Passage], list[Passage]]:
    """(materials, noise) that fit ``budget`` tokens (``n_tokens(passages) -> int``): noise passages
    are dropped first, the last drawn first, order otherwise kept. The Proposer's own passages are
    never dropped here; when they alone overflow, the prompt cuts their text (``rag_prompt``).

    The reference code puts every material in the prompt; a prompt budget must not cost the
    check the Proposer's evidence, or a correct question fails for want of its own passages."""
    materials, noise = list(materials), list(noise)
    while noise and n_tokens(materials) > budget:
        dropped = noise.pop()
        materials = [p for p in materials if p is not dropped]
    return materials, noise


def format_materials(passages: Sequence[Passage]) -> str:
    """The RAG check's materials: ``Doc i (Title: ...) text`` per passage, like the search tool."""
    return "\n".join(f"Doc {i} (Title: {p.title}) {p.text.strip()}" for i, p in enumerate(passages, 1))


_ANSWER = re.compile(r"Answer\s*[:：]", re.IGNORECASE)


def parse_rag_answer(text: str) -> str | None:
    """What follows the last 'Answer:' (first line); without 'Answer:', the whole reply (as the
    reference code, which judges the whole reply then); None only for an empty reply.

    A 1.5B instruct model often answers the RAG check in one sentence without 'Answer:' ("The
    name of the species ... is Equisetum.", run ssp15: 22 of its 34 checks); treating that as no
    answer failed correct questions without asking the judge."""
    text = (text or "").strip()
    found = list(_ANSWER.finditer(text))
    if not found:
        return text or None
    tail = text[found[-1].end():].strip()
    return tail.splitlines()[0].strip() if tail else None


# ---- answers to start from ------------------------------------------------------------------

_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_WORD = r"[A-Z][\w'’-]+"
_SPAN = re.compile(rf"\b(?:[0-9]{{3,4}}(?:\s+(?:BC|BCE|AD|CE)\b)?|{_WORD}(?:\s+(?:of|the|de|von|and|{_WORD}))*)")
_JOINERS = ("of", "the", "de", "von", "and")
_POSSESSIVE = re.compile(r"['’]s$")
_STOP_START = {"The", "A", "An", "In", "On", "It", "He", "She", "They", "This", "That", "These", "Its", "His",
               "Her", "Their", "At", "By", "For", "From", "As", "After", "Before", "During", "When", "While"}


def title_answer(title: str, max_words: int) -> str | None:
    """A document title as an answer: a trailing "(disambiguation)" removed, short enough."""
    t = _PAREN.sub("", (title or "").strip()).strip()
    return t if t and len(t.split()) <= max_words else None


def _sentence_initial(text: str, at: int) -> bool:
    """Does position ``at`` open the text, a line or a sentence (whitespace skipped backwards)?"""
    i = at - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in ".!?:;…\n\r"


def span_answers(text: str, max_words: int) -> list[str]:
    """Short named spans of a text (capitalised word runs, years), each run whole or not at all.

    A word capitalised only because it opens a sentence is no name ("Unlike", "Most", "Based",
    "Vaccines"): it is dropped unless the text also capitalises it mid-sentence. Runs joined by
    "and" (coordinations: "Ron Weasley and Hermione"), runs longer than ``max_words`` (never cut:
    "Gospels of the New" [Testament]) are skipped; a year is its own span ("1927 German" is
    "1927" and "German"); a trailing possessive is removed ("Indonesia's" -> "Indonesia")."""
    text = text or ""
    named = {m.group(0) for m in re.finditer(rf"\b{_WORD}", text) if not _sentence_initial(text, m.start())}
    found = []
    for m in _SPAN.finditer(text):
        words = m.group(0).split()
        if _sentence_initial(text, m.start()) and not words[0].isdigit() and words[0] not in named:
            words = words[1:]
        while words and (words[0] in _STOP_START or words[0] in _JOINERS or words[-1] in _JOINERS):
            words = words[1:] if words[0] in _STOP_START or words[0] in _JOINERS else words[:-1]
        if not words or "and" in words or len(words) > max_words:
            continue
        words[-1] = _POSSESSIVE.sub("", words[-1])
        if len(words) > 1 or len(words[0]) > 3:
            found.append(" ".join(words))
    return list(dict.fromkeys(found))


def corpus_answer(doc_title: str, doc_text: str, rng: random.Random, title_fraction: float,
                  max_words: int) -> str | None:
    """One answer from a document: its title with probability ``title_fraction``, else a span."""
    title = title_answer(doc_title, max_words)
    spans = [s for s in span_answers(doc_text, max_words) if s != title]
    if title and (not spans or rng.random() < title_fraction):
        return title
    return rng.choice(spans) if spans else None


def load_answers(path: str | Path) -> list[str]:
    """A user answer list: one answer per line (.txt), or JSONL with an ``answer`` field."""
    from trainer.paths import check_file

    check_file("ssp.answers_path", path)  # a web worker reads only the datasets folder (trainer/paths.py)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"ssp.answers_path {p} does not exist; give a .txt (one answer per line) or "
                                ".jsonl ({{\"answer\": ...}} per line) file")
    answers = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if p.suffix == ".jsonl":
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{p}:{n} is not valid JSON; each line must be {{\"answer\": \"...\"}}") from None
            if not isinstance(row, dict) or not str(row.get("answer", "")).strip():
                raise ValueError(f"{p}:{n} has no non-empty \"answer\" field")
            line = str(row["answer"]).strip()
        answers.append(line)
    if not answers:
        raise ValueError(f"{p} holds no answers")
    return answers
