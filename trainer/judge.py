"""LLM-as-judge shared by SSP, SCOPE, SCORE and eval: one ``Judge`` over two backends.

Backends (anything with ``complete(conversations, temperature, max_tokens) -> list[str|None]``,
``None`` meaning the call failed):
- ``GeneratorBackend``: the frozen base through a ``Generator`` (``use_adapter=False`` on a
  LoRA policy, or a generator built on a separate frozen copy with ``use_adapter=True``);
- ``EndpointBackend``: an OpenAI-compatible ``/chat/completions`` endpoint through
  ``EndpointClient`` (urllib; timeout, retries with backoff, a concurrency limit).

Operations, each batched into ONE backend call for many items:
- ``equivalent(question, gold, predictions) -> list[bool|None]``: SSP's Correct/Wrong judge;
- ``gate(kind, tasks, documents) -> list[int]``: SCOPE gate 1 ("entity": entity
  identifiability) and gate 2 ("relevance": relevance to the source document);
- ``write_rubrics(task, documents) -> list[Rubric]``: 3-5 rubrics at temperature 0;
- ``grade(task, response, rubric) -> int``: strict 0/1 at temperature 0.6.

Output formats are strict and documented next to each parser, with one leniency: a 0/1 score may be
followed by text that gives no other score (Qwen2.5-Coder-1.5B, the frozen base of our GPU runs, appended a
``<note>`` or repeated its ``<score>`` after 999 of 1,000 greedy grades; read strictly, every one was a format
failure and scored 0; the paper's prompt asks for nothing after the score). Such replies are counted as
``<kind>_trailing_text``. Broken output never raises:
the item reads as a failure (None for equivalence, 0 for gates and grades, no rubric) and is
counted in ``judge.stats``; a failed backend call is counted too and never read as a pass.
Prompt wording is ours; the structure follows ssp.txt (Appendix D) and scope.txt (Appendix H).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from trainer.endpoints import (
    ENV as ENDPOINTS_ENV,
    UNREACHABLE,
    KeyNotAllowed,
    check_destination,
    completions_url,
    endpoint_allowed,
    guarded,
    key_may_go,
    open_url,
    parse_allow_list,
    refusal,
)
from trainer.prompts import chat
from trainer.rollout.types import SamplingParams
from trainer.tools.corpus import truncate_to_tokens

PRIORITIES = ("critical", "important", "bonus")
GATE_KINDS = {"entity": "entity", "identifiability": "entity", "1": "entity",
              "relevance": "relevance", "source_relevance": "relevance", "2": "relevance"}

# ---- prompts ------------------------------------------------------------------------------------

EQUIVALENCE_SYSTEM = "You are an impartial judge who decides whether answers are correct."
EQUIVALENCE_USER = """Decide whether the model's answer agrees with the reference answer.

Question: {question}

Model answer: {prediction}

Reference answer: {gold}

Criteria:
1. The model answer must answer the question and mean the same as the reference answer.
2. Numbers must be equal or very close.
3. For text answers, the core meaning must be right.
4. Different wording or language is fine when the core answer is the same.
5. An answer that contains the reference answer and nothing that contradicts it is correct.

Reply with exactly one word: "Correct" or "Wrong". No explanation."""

SCORE_FORMAT = """Output format (follow it exactly):
1. First your reasoning inside <think></think>
2. Then exactly one score inside <score></score>: 0 or 1
3. Nothing else"""

GATE_ENTITY = """You see ONLY a task prompt. Grade whether its entities are identifiable.

Score 1 if a researcher could find the right person, place, work or concept from what is written, even \
without knowing it beforehand.
Score 0 only if a central entity is truly ambiguous: the name alone fits several well-known things and the \
task gives no context to tell them apart.

Context resolves ambiguity: "John Smith" alone is ambiguous, "John Smith's role in the Jamestown colony" is \
not. Judge the whole task, not names in isolation.
Pass (1): context (topic, field, period, related entities) makes the referent clear; named works with enough \
context; full names of organisations, institutions or places; named concepts, doctrines, terms or events; \
well-known acronyms or acronyms given with their full name.
Fail (0): a name without any disambiguating context; an obscure acronym never expanded; only generic \
references with no proper noun ("the coach", "the team").

""" + SCORE_FORMAT + """

Now grade:
<task_prompt>{task}</task_prompt>"""

GATE_RELEVANCE = """You are a strict binary grader. You see a SOURCE DOCUMENT and a TASK PROMPT.

Score 1 if the task is topically related to the source document: it asks about people, events, places, \
concepts or themes that appear in the document or relate to it directly.
Score 0 if the task is clearly unrelated: its topic, field or entities have no connection to the document.

Rules:
- The task does NOT have to be answerable from the document alone; it only has to be related.
- Generic or vague tasks that would fit any document score 0.
- Tasks that name specific entities, events or themes of the document score 1.

""" + SCORE_FORMAT + """

Now grade:
<source_document>{document}</source_document>
<task_prompt>{task}</task_prompt>"""

RUBRICS_USER = """Write evaluation rubrics for the task below.

## Task Type
{task_type}

## Task Prompt
{task}

## Context Documents
{documents}

## Instructions
Write {n_min} to {n_max} positive rubrics that measure excellent work on the task's core goals.
1. Each rubric is ONE sentence of at most about 25 words with one clear requirement (not compound).
2. Each rubric starts with a command verb, e.g. Identifies, Explains, Provides, Compares, Evaluates, \
Synthesises, Incorporates, Addresses, Demonstrates, Integrates, Supports, Applies.
3. Each rubric has exactly one priority:
   - critical: a core requirement; without it the response is inadequate
   - important: a strong sign of quality
   - bonus: marks an exceptional response
4. Each rubric is specific to THIS task and its documents (not generic), separates good from bad \
responses, and can be judged objectively.

## Output Format (exactly this, nothing else)
<rubrics>
<rubric priority="critical">One sentence starting with a command verb.</rubric>
<rubric priority="important">...</rubric>
</rubrics>"""

GRADE_USER = """You are an expert grader. Judge the response to the task against ONE rubric. Be strict: give \
credit only when the rubric is met completely and unambiguously.

<prompt>{task}</prompt>
<response>{response}</response>
<rubric>{rubric}</rubric>

Scores (only these two):
- 1 = meets the rubric fully, nothing missing
- 0 = does not fully meet it (a refusal, no attempt, or partial satisfaction all score 0)
When in doubt, score 0. There is no partial credit.

""" + SCORE_FORMAT


# ---- parsers (never raise) ----------------------------------------------------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_LEADING_SCORE = re.compile(r"\A\s*(?:<think>.*?</think>\s*)?<score>\s*([01])\s*</score>(.*)\Z", re.DOTALL)
# in the text after the score: another score in any form (a tag in any case, "Final score: 0", \boxed{0}), a stray
# score tag, or a second thought
_LATER_SCORE = re.compile(r"<\s*score\s*>\s*([^<]*?)\s*<\s*/\s*score\s*>|(<\s*/?\s*score\b[^>]*>|<\s*/?\s*think\b)"
                          r"|\bscore\b[^\d<]{0,12}?\b([01])\b|\\boxed\s*\{\s*([01])\s*\}", re.DOTALL | re.IGNORECASE)
_VERDICT_WORD = re.compile(r"\b(correct|incorrect|wrong)\b")
_RUBRICS_BLOCK = re.compile(r"<rubrics>(.*?)</rubrics>", re.DOTALL)
_RUBRIC_ITEM = re.compile(r"<rubric\s+priority\s*=\s*[\"']?([A-Za-z]+)[\"']?\s*>(.*?)</rubric>", re.DOTALL)
_NOT_A_VERB = frozenset("a an the this that these those it its response answer rubric task if when".split())


def parse_verdict(text: str | None) -> bool | None:
    """"Correct" -> True, "Wrong"/"Incorrect" -> False, outside any ``<think>`` block; no
    verdict word, or words of both kinds -> None."""
    if not text:
        return None
    body = _THINK.sub(" ", text).lower()
    kinds = {w == "correct" for w in _VERDICT_WORD.findall(body)}
    return kinds.pop() if len(kinds) == 1 else None


def parse_score(text: str | None) -> int | None:
    """``[<think>...</think>] <score>0|1</score>``, then optionally text that holds no other score (a
    ``<note>``, or the same score again); anything else -> None: text before the score, a score
    other than 0/1, a different score after it in any form (a tag in any case, "score: 0", ``\\boxed{0}``),
    a stray score tag, a ``<think>`` after the score."""
    return _read_score(text)[0]


def _read_score(text: str | None) -> tuple[int | None, bool]:
    """(``parse_score``'s reading, whether text followed the score)."""
    m = _LEADING_SCORE.match(text or "")
    if not m:
        return None, False
    score, rest = m.group(1), m.group(2)
    for later in _LATER_SCORE.finditer(rest):
        stray, value = later.group(2), later.group(1) or later.group(3) or later.group(4)
        if stray or value != score:  # a stray tag, a second thought, or a different score
            return None, False
    return int(score), bool(rest.strip())


@dataclass
class Rubric:
    text: str
    priority: str = "important"

    def to_dict(self) -> dict:
        return asdict(self)


def rubric_problem(text: str, priority: str) -> str | None:
    """Why one parsed rubric breaks the rules (None = fine)."""
    if priority not in PRIORITIES:
        return f"priority {priority!r} is not one of {', '.join(PRIORITIES)}"
    if not text:
        return "empty rubric"
    if "<" in text or ">" in text:
        return "markup inside the rubric"
    words = text.split()
    if len(words) > 40:
        return "longer than one sentence of ~25 words"
    if re.search(r"[.!?]\s+\S", text):
        return "more than one sentence"
    first = words[0]
    if not (first[0].isupper() and first.isalpha()) or first.lower() in _NOT_A_VERB:
        return f"does not start with a command verb ({first!r})"
    return None


def parse_rubrics(text: str | None, n_min: int = 3, n_max: int = 5) -> tuple[list[Rubric], list[str]]:
    """Rubrics from the documented ``<rubrics><rubric priority="...">...</rubric>...</rubrics>``
    format. Items that break a rule are dropped; fewer than ``n_min`` valid -> no rubrics; more
    than ``n_max`` -> the first ``n_max``. Returns (rubrics, problems); a problem with one
    item reads "rubric N: why"."""
    if not text:
        return [], ["no output"]
    block = _RUBRICS_BLOCK.search(text)
    if not block:
        return [], ["no <rubrics>...</rubrics> block"]
    rubrics: list[Rubric] = []
    problems: list[str] = []
    for n, (priority, body) in enumerate(_RUBRIC_ITEM.findall(block.group(1)), start=1):
        body, priority = " ".join(body.split()), priority.lower()
        problem = rubric_problem(body, priority)
        if problem:
            problems.append(f"rubric {n}: {problem}")
        elif body.lower() in {r.text.lower() for r in rubrics}:
            problems.append(f"rubric {n}: duplicate")
        else:
            rubrics.append(Rubric(text=body, priority=priority))
    if len(rubrics) < n_min:
        problems.append(f"{len(rubrics)} valid rubrics, fewer than {n_min}")
        return [], problems
    return rubrics[:n_max], problems


# ---- backends -----------------------------------------------------------------------------------

class EndpointError(RuntimeError):
    """An OpenAI-compatible endpoint that failed after every retry."""


class EndpointClient:
    """A small client for ``POST {base_url}/chat/completions`` (OpenAI-compatible).

    ``api_key_env`` names the environment variable holding the key (no key -> no header, as
    local servers expect); a key the operator's allow-list keeps from this URL is refused with
    ``KeyNotAllowed`` (trainer/endpoints.py), redirects are never followed. Retries timeouts,
    connection errors, 429 and 5xx with exponential backoff; other 4xx (and 3xx) fail at once.
    ``stats`` counts requests, retries and failures.
    """

    def __init__(self, base_url: str, model: str | None = None, *, api_key_env: str = "SELFPLAY_JUDGE_API_KEY",
                 timeout: float = 60.0, retries: int = 3, concurrency: int = 8, backoff: float = 0.5):
        if not base_url or not re.match(r"https?://", base_url):
            raise ValueError(f"judge endpoint {base_url!r} must be an http(s) base URL such as http://host:8000/v1")
        self.url = completions_url(base_url)
        self.model = model or "default"
        self.api_key_env = api_key_env
        if api_key_env and os.environ.get(api_key_env) and not key_may_go(api_key_env, self.url):
            raise KeyNotAllowed(refusal(api_key_env, self.url))  # trainer/endpoints.py: the operator's allow-list
        check_destination(self.url)  # a web worker: http(s), and internal addresses only when listed
        # a web worker reports every failure to connect to an unlisted endpoint alike: its errors map no ports
        self.opaque = guarded() and not endpoint_allowed(self.url, parse_allow_list(os.environ.get(ENDPOINTS_ENV)))
        self.timeout, self.retries, self.backoff = timeout, max(0, retries), backoff
        self.concurrency = max(1, concurrency)
        self.stats = {"requests": 0, "retries": 0, "failures": 0, "timeouts": 0, "truncated": 0}
        self._lock = threading.Lock()

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _post(self, body: dict) -> str:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            if not key_may_go(self.api_key_env, self.url):
                raise KeyNotAllowed(refusal(self.api_key_env, self.url))
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with open_url(req, timeout=self.timeout) as resp:  # never follows a redirect (it would resend the key)
            payload = json.loads(resp.read().decode("utf-8"))
        content = payload["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise ValueError("the reply has no text content")
        if payload["choices"][0].get("finish_reason") == "length":
            self._count("truncated")  # cut at max_tokens
        return content

    def chat(self, messages: list[dict], temperature: float = 0.0, max_tokens: int | None = None) -> str:
        """The assistant text for one conversation; ``EndpointError`` after the last retry."""
        body = {"model": self.model, "messages": messages, "temperature": temperature}
        if max_tokens:
            body["max_tokens"] = max_tokens
        last = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(self.backoff * 2 ** (attempt - 1))
            self._count("requests")
            try:
                return self._post(body)
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code} from {self.url}"
                if exc.code == 401:
                    last += f" (set ${self.api_key_env} to the endpoint's API key)"
                if exc.code != 429 and exc.code < 500:
                    break
            except (TimeoutError, socket.timeout) as exc:
                if self.opaque:
                    last = f"cannot reach {self.url}: {UNREACHABLE}"
                    continue
                self._count("timeouts")
                last = f"timed out after {self.timeout}s ({exc})"
            except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", exc)
                if self.opaque:
                    last = f"cannot reach {self.url}: {UNREACHABLE}"
                    continue
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    self._count("timeouts")
                last = f"cannot reach {self.url}: {reason}"
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                last = f"malformed reply from {self.url}: {exc}"
        self._count("failures")
        raise EndpointError(last)

    def chat_many(self, conversations: list[list[dict]], temperature: float = 0.0,
                  max_tokens: int | None = None) -> list[str | None]:
        """Many conversations, at most ``concurrency`` in flight; a failed one -> None."""
        def one(messages):
            try:
                return self.chat(messages, temperature, max_tokens)
            except EndpointError:
                return None

        if not conversations:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(conversations))) as pool:
            return list(pool.map(one, conversations))


class EndpointBackend:
    def __init__(self, client: EndpointClient):
        self.client = client
        self.tokenizer = None

    @property
    def n_truncated(self) -> int:
        """Replies cut at their token budget so far (the endpoint's finish_reason "length")."""
        return self.client.stats["truncated"]

    def complete(self, conversations: list[tuple[str | None, str]], temperature: float,
                 max_tokens: int) -> list[str | None]:
        msgs = [([{"role": "system", "content": s}] if s else []) + [{"role": "user", "content": u}]
                for s, u in conversations]
        return self.client.chat_many(msgs, temperature, max_tokens)


class GeneratorBackend:
    """The frozen base as judge. ``use_adapter=False`` switches a LoRA policy's adapter off;
    pass a generator over a separate frozen copy with ``use_adapter=True`` instead."""

    def __init__(self, generator, tokenizer, use_adapter: bool = False):
        self.generator, self.tokenizer, self.use_adapter = generator, tokenizer, use_adapter
        self.n_truncated = 0  # replies cut at their token budget so far

    def complete(self, conversations: list[tuple[str | None, str]], temperature: float,
                 max_tokens: int) -> list[str | None]:
        if not conversations:
            return []
        prompts = [chat(self.tokenizer, s, u) for s, u in conversations]
        params = SamplingParams(temperature=temperature, max_new_tokens=max_tokens, logprobs=False)  # text only
        outs = self.generator.generate(prompts, params, use_adapter=self.use_adapter)
        self.n_truncated += sum(o.finish_reason == "length" for o in outs)
        return [o.text for o in outs]


# ---- the judge ----------------------------------------------------------------------------------

# Budgets when the caller names none (recipes pass their own config fields): a thinking judge
# reasons inside <think> before its verdict, so even a one-word answer needs room (a judge that
# answers at once stops at its end of sequence, whatever the budget). SCOPE's paper: rubric lists
# 8,192 tokens, grades 16,384.
DEFAULT_MAX_TOKENS = {"equivalent": 1024, "gate": 8192, "rubrics": 8192, "grade": 16384}
DEFAULT_TEMPERATURE = {"equivalent": 0.0, "gate": 0.0, "rubrics": 0.0, "grade": 0.6}


class Judge:
    """See the module docstring. ``max_input_tokens`` bounds documents and responses pasted
    into judge prompts (cut with the backend's tokenizer, or by words for an endpoint)."""

    def __init__(self, backend, *, max_tokens: dict | int | None = None, temperature: dict | None = None,
                 max_input_tokens: int = 2048):
        self.backend = backend
        if isinstance(max_tokens, int):
            max_tokens = {k: max_tokens for k in DEFAULT_MAX_TOKENS}
        self.max_tokens = {**DEFAULT_MAX_TOKENS, **(max_tokens or {})}
        self.temperature = {**DEFAULT_TEMPERATURE, **(temperature or {})}
        self.max_input_tokens = max_input_tokens
        self.stats: dict[str, int] = {
            "calls": 0, "backend_failures": 0, "equivalent_unparsed": 0, "gate_format_failures": 0,
            "grade_format_failures": 0, "rubric_items_rejected": 0, "rubric_lists_failed": 0, "truncated": 0,
            "gate_trailing_text": 0, "grade_trailing_text": 0}
        self._window = (0, 0)  # (calls, truncated) at the last step_metrics()

    @classmethod
    def from_generator(cls, generator, tokenizer, use_adapter: bool = False, **kw) -> "Judge":
        return cls(GeneratorBackend(generator, tokenizer, use_adapter), **kw)

    @classmethod
    def from_endpoint(cls, base_url: str, model: str | None = None, *, api_key_env: str = "SELFPLAY_JUDGE_API_KEY",
                      timeout: float = 60.0, retries: int = 3, concurrency: int = 8, **kw) -> "Judge":
        client = EndpointClient(base_url, model, api_key_env=api_key_env, timeout=timeout, retries=retries,
                                concurrency=concurrency)
        return cls(EndpointBackend(client), **kw)

    # -- plumbing --
    def _cut(self, text: str) -> str:
        return truncate_to_tokens(text or "", getattr(self.backend, "tokenizer", None), self.max_input_tokens)

    def _ask(self, op: str, conversations: list[tuple[str | None, str]]) -> list[str | None]:
        if not conversations:
            return []
        before = getattr(self.backend, "n_truncated", 0)
        outs = self.backend.complete(conversations, self.temperature[op], self.max_tokens[op])
        self.stats["calls"] += len(conversations)
        self.stats["backend_failures"] += sum(o is None for o in outs)
        self.stats["truncated"] += getattr(self.backend, "n_truncated", 0) - before
        return outs

    def failure_rate(self) -> float:
        bad = sum(v for k, v in self.stats.items()
                  if k not in ("calls", "rubric_items_rejected", "truncated") and not k.endswith("_trailing_text"))
        return bad / self.stats["calls"] if self.stats["calls"] else 0.0

    def step_metrics(self) -> dict[str, float]:
        """Role "judge" metrics since the last call: calls made and the share of replies cut at their
        token budget (a thinking judge cut before its verdict reads as a failure)."""
        calls, cut = self.stats["calls"] - self._window[0], self.stats["truncated"] - self._window[1]
        self._window = (self.stats["calls"], self.stats["truncated"])
        return {"calls": float(calls), "truncated_rate": cut / calls if calls else 0.0}

    # -- operations --
    def equivalent(self, question, gold, predictions) -> list[bool | None]:
        """Is each prediction equivalent to the gold answer? One question with many predictions,
        or three equal-length lists (questions, golds, predictions). None = judge failed."""
        if isinstance(question, str):
            items = [(question, gold, p) for p in predictions]
        else:
            if not (len(question) == len(gold) == len(predictions)):
                raise ValueError("equivalent(questions, golds, predictions) needs three lists of the same length")
            items = list(zip(question, gold, predictions))
        return self.equivalent_batch(items)

    def equivalent_batch(self, items: list[tuple[str, str, str]]) -> list[bool | None]:
        """(question, gold, prediction) triples; an empty prediction is Wrong without asking."""
        out: list[bool | None] = [False] * len(items)
        ask = [i for i, (_, _, p) in enumerate(items) if p and p.strip()]
        texts = self._ask("equivalent", [(EQUIVALENCE_SYSTEM, EQUIVALENCE_USER.format(
            question=items[i][0], gold=items[i][1], prediction=self._cut(items[i][2]))) for i in ask])
        for i, text in zip(ask, texts):
            out[i] = parse_verdict(text)
            if out[i] is None and text is not None:
                self.stats["equivalent_unparsed"] += 1
        return out

    def gate(self, kind: str, tasks, documents=None, *, with_texts: bool = False):
        """SCOPE's quality gates, 0/1 per task: kind "entity" (gate 1) or "relevance" (gate 2,
        needs one source document per task). Unparseable output or a failed call -> 0."""
        gate = GATE_KINDS.get(str(kind).lower())
        if gate is None:
            raise ValueError(f"unknown gate {kind!r}; use 'entity' or 'relevance'")
        tasks = [tasks] if isinstance(tasks, str) else list(tasks)
        if gate == "relevance":
            documents = [documents] * len(tasks) if isinstance(documents, str) else list(documents or [])
            if len(documents) != len(tasks):
                raise ValueError("the relevance gate needs one source document per task")
            convs = [(None, GATE_RELEVANCE.format(document=self._cut(d), task=t)) for t, d in zip(tasks, documents)]
        else:
            convs = [(None, GATE_ENTITY.format(task=t)) for t in tasks]
        return self._scored("gate", convs, with_texts)

    def write_rubrics(self, task: str, documents, n_min: int = 3, n_max: int = 5,
                      task_type: str = "open-ended task") -> list[Rubric]:
        """3-5 rubrics for one task (temperature 0). No valid list -> []."""
        return self.write_rubrics_batch([(task, documents, task_type)], n_min, n_max)[0]

    def write_rubrics_batch(self, items: list[tuple], n_min: int = 3, n_max: int = 5) -> list[list[Rubric]]:
        """(task, documents[, task_type]) items -> one rubric list each, in one backend call."""
        convs = []
        for item in items:
            task, documents = item[0], item[1]
            task_type = item[2] if len(item) > 2 and item[2] else "open-ended task"
            docs = [documents] if isinstance(documents, str) else list(documents or [])
            joined = "\n\n".join(f"Document {i}:\n{self._cut(d)}" for i, d in enumerate(docs, 1)) or "(none)"
            convs.append((None, RUBRICS_USER.format(task_type=task_type, task=task, documents=joined,
                                                    n_min=n_min, n_max=n_max)))
        out = []
        for text in self._ask("rubrics", convs):
            rubrics, problems = parse_rubrics(text, n_min, n_max)
            self.stats["rubric_items_rejected"] += sum(p.startswith("rubric ") for p in problems)
            if not rubrics and text is not None:
                self.stats["rubric_lists_failed"] += 1
            out.append(rubrics)
        return out

    def grade(self, task: str, response: str, rubric) -> int:
        """1 if the response fully meets the rubric, else 0 (strict format, temperature 0.6)."""
        return self.grade_batch([(task, response, rubric)])[0]

    def grade_batch(self, items: list[tuple], *, with_texts: bool = False):
        """(task, response, rubric text or Rubric) items -> 0/1 each, in one backend call."""
        convs = [(None, GRADE_USER.format(task=t, response=self._cut(r), rubric=getattr(rb, "text", rb)))
                 for t, r, rb in items]
        return self._scored("grade", convs, with_texts)

    def _scored(self, kind: str, convs, with_texts: bool):
        """Ask ``convs`` as ``kind`` ("gate" / "grade") and read a 0/1 score from each answer; an answer
        without a readable score counts 0 and as a ``<kind>_format_failures``."""
        texts = self._ask(kind, convs)
        scores = []
        for text in texts:
            s, trailing = _read_score(text)
            if s is None and text is not None:
                self.stats[f"{kind}_format_failures"] += 1
            elif trailing:
                self.stats[f"{kind}_trailing_text"] += 1
            scores.append(s or 0)
        return list(zip(scores, texts)) if with_texts else scores


# ---- construction from a recipe context ---------------------------------------------------------

def key_env(ref: str | None, default: str = "SELFPLAY_JUDGE_API_KEY") -> str:
    """The environment variable an endpoint's key is read from: ``env:NAME`` -> NAME, unset -> the
    default. A ``sealed:`` key is the web server's: only its worker opens it (into an env: one)."""
    if not ref:
        return default
    if ref.startswith("env:"):
        return ref[4:]
    raise ValueError("this API key was sealed by the web server; only its worker can open it. Standalone, give "
                     "the key as env:NAME (an environment variable holding it)")


def make_judge(ctx, kind: str = "frozen_base", endpoint: str | None = None, model: str | None = None,
               api_key_env: str = "SELFPLAY_JUDGE_API_KEY", **kw) -> Judge | None:
    """The judge a config asks for: "frozen_base" (the policy's frozen base), "endpoint"
    (OpenAI-compatible), or "exact" (no LLM judge: returns None)."""
    if kind == "exact":
        return None
    if kind == "endpoint":
        if not endpoint:
            raise ValueError("judge=endpoint needs the endpoint's base URL (e.g. http://127.0.0.1:8000/v1)")
        return Judge.from_endpoint(endpoint, model, api_key_env=api_key_env, **kw)
    if kind != "frozen_base":
        raise ValueError(f"unknown judge {kind!r}; use frozen_base, endpoint or exact")
    policy = ctx.policy
    if getattr(policy, "is_lora", False):
        return Judge.from_generator(ctx.generator, policy.tokenizer, use_adapter=False, **kw)
    if getattr(policy, "ref_model", None) is not None:
        from trainer.rollout.hf import HFGenerator

        return Judge.from_generator(HFGenerator(policy.ref_model, policy.tokenizer), policy.tokenizer,
                                    use_adapter=True, **kw)
    raise RuntimeError("the frozen-base judge needs LoRA (model.lora.r > 0) or a policy loaded with its frozen copy")


make_equivalence_judge = make_judge
