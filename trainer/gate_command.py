"""``python -m trainer gate TASKS.jsonl [--method spice] [--model M]``: the task gate on any task file.

Each line of TASKS.jsonl is one task: ``question``, ``answer``, ``document`` (the text it was written from), and
optionally ``format`` ("mcq" | "free_form"; default: "mcq" when the question lists options A) to D)),
``answer_type`` (default: "integer" for a whole number, "float" for another number, "boolean" for true/false,
else "string"), ``document_id`` (default: the document text) and ``step``. The rules over a step's tasks (a
question repeated across documents, an answer given for many documents, template clusters) see every line of
its step; without ``step`` the whole file is one step.

Without ``--model`` only the rules that need no model run. With ``--model`` (a catalog name, a folder, a run's
checkpoint: what ``python -m trainer.evaluate`` takes) the solver answers each task ``--answers`` times with its full
budget and as a guess probe, and a reader with the document ``gate.consensus_samples`` times; an MCQ's options are
put in a seeded random order first (``gate.shuffle_options``), as in training.

Prints one JSON line per task on stdout: ``{"line", "question", "valid", "failed": [rule, ...], "reasons": [...],
"cluster", "cluster_share", "pass_rate"?, "guess_rate"?, "reader_agreement"?, "shuffled_question"?,
"shuffled_answer"?}``; then a summary line on stderr
``{"summary": {"tasks", "valid", "failed_by_rule": {...}, "largest_cluster_share", "largest_answer_share"}}``.
Exit status 2 with one line on stderr for a file that cannot be read.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from trainer.jsonl import json_objects
from trainer.method_configs import SECTIONS
from trainer.methods.gate import (OPTIONS_UNCLEAR, GateTask, chance_level, cluster_shares, consensus, guessable,
                                  mark_repeated, mark_repeated_answers, option_spans, task_failures,
                                  template_clusters)
from trainer.verify import normalize_answer, plain_number

_MCQ = re.compile(r"(?:^|[\s(\[])D\s*[).:]")


class TaskFileError(ValueError):
    """A task file that cannot be screened; the message names the line and what to fix."""


def read_tasks(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"{path} is not a file; give a JSONL file with one task per line "
                            '({"question": ..., "answer": ..., "document": ...})')
    rows = []
    with path.open("rb") as fh:
        for n, row in json_objects(fh, str(path), TaskFileError, 'give {"question": ..., "answer": ..., "document": ...}'):
            if not isinstance(row.get("question"), str):
                raise TaskFileError(f'{path}:{n}: needs a "question" string (and "answer", "document")')
            answer = row.get("answer")
            if isinstance(answer, bool):
                answer = "true" if answer else "false"
            row["answer"] = "" if answer is None else str(answer)
            if row.get("document") is not None and not isinstance(row["document"], str):
                raise TaskFileError(f'{path}:{n}: "document" must be a string')
            row["line"] = n
            rows.append(row)
    return rows


def _answer_type(answer: str) -> str:
    if answer.strip().lower() in ("true", "false"):
        return "boolean"
    value = plain_number(answer)
    if value is None:
        return "string"
    return "integer" if float(value).is_integer() else "float"


def gate_tasks(rows: list[dict]) -> list[GateTask]:
    out = []
    for r in rows:
        fmt = r.get("format") or ("mcq" if _MCQ.search(r["question"]) else "free_form")
        kind = "mcq" if fmt == "mcq" else (r.get("answer_type") or _answer_type(r["answer"])).lower()
        out.append(GateTask(r["question"], r["answer"], r.get("document"), fmt, kind))
    return out


@dataclass
class _Written:
    """A task as the rules over a step's tasks read a writer's attempt: its document, task and reason."""

    doc_id: str
    task: GateTask
    reason: str = ""

    @property
    def valid(self) -> bool:
        return not self.reason


def screen(rows: list[dict], gate, method: str = "spice", require_grounding: bool = True) -> list[dict]:
    """The rules that need no model, over the whole file as one step; one verdict dict per row."""
    tasks = gate_tasks(rows)
    verdicts = []
    for row, task in zip(rows, tasks):
        failed = task_failures(task, max_copy_ratio=gate.copy_ratio, require_grounding=require_grounding,
                               whole_words=SECTIONS[method].answer_copy == "whole_words",
                               recall=gate.recall and SECTIONS[method].recall_rule)  # as training applies it
        if gate.shuffle_options and task.format == "mcq" and option_spans(task.question) is None:
            failed.append(("options", OPTIONS_UNCLEAR))  # as in training: its options could not be shuffled
        verdicts.append({"line": row["line"], "question": task.question, "failed": [f[0] for f in failed],
                         "reasons": [f[1] for f in failed]})
    # the rules over a step's tasks, step by step (a line's "step"; the whole file is one step without it)
    by_step: dict = {}
    for i, r in enumerate(rows):
        by_step.setdefault(str(r.get("step")), []).append(i)
    for idx in by_step.values():
        _across(rows, tasks, verdicts, idx, gate)
    return verdicts


def _across(rows: list[dict], tasks: list[GateTask], verdicts: list[dict], idx: list[int], gate) -> None:
    """The rules over one step's tasks (the lines ``idx``): tasks as the writers' attempts (doc_id, task, reason)."""
    attempts = [_Written(str(rows[i].get("document_id") or rows[i].get("document") or rows[i]["line"]), tasks[i])
                for i in idx]
    mark_repeated(attempts)
    for i, a in zip(idx, attempts):
        if a.reason:
            verdicts[i]["failed"].append("repeated")
            verdicts[i]["reasons"].append(a.reason.removeprefix("task: "))
            a.reason = ""
    mark_repeated_answers(attempts)
    for i, a in zip(idx, attempts):
        if a.reason:
            verdicts[i]["failed"].append("repeated_answer")
            verdicts[i]["reasons"].append(a.reason.removeprefix("task: "))
    clusters = template_clusters([tasks[i].question for i in idx], gate.template_similarity)
    for i, c, share in zip(idx, clusters, cluster_shares(clusters) if clusters else []):
        verdicts[i]["cluster"], verdicts[i]["cluster_share"] = f"{rows[i].get('step')}:{c}", round(share, 4)


def probe(rows: list[dict], verdicts: list[dict], model: str, gate, answers: int, max_new_tokens: int) -> None:
    """The rules that need the model (guess probe, consensus reader) on every task, in place."""
    from trainer.evaluate import load_model
    from trainer.methods.spice_tasks import Attempt, SpiceTask, answer, guess, read, shuffle
    from trainer.rollout import SamplingParams
    from trainer.tools.corpus import Document

    loaded = load_model(model)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    spice = SECTIONS["spice"](reasoner_max_new_tokens=max_new_tokens)
    ctx = SimpleNamespace(config=SimpleNamespace(spice=spice, gate=gate,
                                                 rollout=SimpleNamespace(group_size=answers,
                                                                         max_new_tokens=max_new_tokens)),
                          policy=SimpleNamespace(tokenizer=loaded.tokenizer), generator=loaded.generator,
                          sampling_params=lambda **kw: SamplingParams(**{**sampling.__dict__, **kw}))
    tasks = gate_tasks(rows)
    attempts = [Attempt(str(r["line"]), "", i, str(i), [], group=i,
                        task=SpiceTask(t.format, t.answer_type, t.question, t.answer))
                for i, (r, t) in enumerate(zip(rows, tasks))]
    if gate.shuffle_options:  # as in training: the model reads an MCQ with its options in a random (seeded) order
        for a in attempts:
            if a.task.format == "mcq":
                shuffle(a, "gate")
    answer(ctx, attempts)
    if gate.guess_probe:
        guess(ctx, attempts)
    with_docs = [a for a, r in zip(attempts, rows) if r.get("document")]
    if gate.consensus_samples and with_docs:
        docs = [Document(str(r["line"]), r.get("title", ""), r.get("document") or "") for r in rows]
        read(ctx, with_docs, docs)
    for v, a, t in zip(verdicts, attempts, tasks):
        v["pass_rate"] = a.pass_rate
        if a.written_letter is not None and not a.reason:  # what the model read and was graded against
            v["shuffled_question"], v["shuffled_answer"] = a.task.question, a.task.answer
        if a.guessed is not None:
            v["guess_rate"] = sum(a.guessed) / len(a.guessed)
            if guessable(v["guess_rate"], a.pass_rate, chance_level(t.format, t.answer_type)):
                v["failed"].append("guessable")
                v["reasons"].append(f"task is guessable (guessed {v['guess_rate']:.0%} without reasoning, "
                                    f"{a.pass_rate:.0%} with)")
        if a.agrees is not None:
            v["reader_agreement"] = sum(a.agrees) / len(a.agrees)
            if not consensus(a.agrees):
                v["failed"].append("consensus")
                v["reasons"].append(f"reader with the document disagrees ({sum(a.agrees)} of {len(a.agrees)} agree)")


def summary(rows: list[dict], verdicts: list[dict]) -> dict:
    by_rule = Counter(rule for v in verdicts for rule in v["failed"])
    answers = [normalize_answer(r["answer"]) for r in rows if r["answer"]]
    clusters = Counter(v.get("cluster") for v in verdicts)
    return {"tasks": len(verdicts), "valid": sum(v["valid"] for v in verdicts), "failed_by_rule": dict(by_rule),
            "largest_cluster_share": max(clusters.values()) / len(verdicts) if verdicts else 0.0,
            "largest_answer_share": max(Counter(answers).values()) / len(answers) if answers else 0.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tasks", help="JSONL file: question, answer, document [, format, answer_type] per line")
    parser.add_argument("--method", default="spice", choices=[m for m, s in SECTIONS.items() if s.writes_tasks],
                        help="whose rules (a method whose answer check is a substring check reads copies so)")
    parser.add_argument("--model", default=None, help="also run the rules that need a model (guess probe, consensus)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="gate.KEY=VALUE",
                        help="a gate setting, e.g. --set gate.copy_ratio=0.9 (repeatable)")
    parser.add_argument("--answers", type=int, default=8, help="solver answers per task with --model (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="the solver's budget with --model")
    parser.add_argument("--no-grounding", action="store_true", help="skip the 'not about the document' rule")


def main(args) -> int:
    from trainer.config import ConfigError, load_config

    try:
        cfg = load_config({"method": "spice"}, [o if o.startswith("gate.") else f"gate.{o}" for o in args.overrides])
        rows = read_tasks(args.tasks)
    except (ConfigError, TaskFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verdicts = screen(rows, cfg.gate, args.method, require_grounding=not args.no_grounding)
    if args.model:
        from trainer.evaluate import ModelSpecError
        from trainer.models import ModelNotFound

        spec = args.model  # a bare catalog name means that base model
        if ":" not in spec and "/" not in spec and not Path(spec).exists():
            spec = f"base:{spec}"
        try:
            probe(rows, verdicts, spec, cfg.gate, args.answers, args.max_new_tokens)
        except (ModelSpecError, ModelNotFound) as exc:
            print(f"error: --model {args.model}: {exc}", file=sys.stderr)
            return 2
    for v in verdicts:
        v["valid"] = not v["failed"]
        print(json.dumps(v, ensure_ascii=False))
    print(json.dumps({"summary": summary(rows, verdicts)}), file=sys.stderr)  # stdout: one line per task
    return 0
