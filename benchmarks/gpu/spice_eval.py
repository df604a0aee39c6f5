"""SPICE before and after on documents the run never saw (issue 21 (b)): the cross-play matrix (SPICE
Figure 3), GSM8K and the held-out cloze set, for the base model and checkpoints of one run.

On the GPU machine, from the repository root after ``source benchmarks/gpu/setup.sh``::

    python3 benchmarks/gpu/spice_eval.py --run /tmp/runs/spice --models base:/tmp/models/q15 \\
        /tmp/runs/spice/checkpoints/step-000040 --docs .gpu_assets/wiki_heldout.jsonl --tasks 128 --answers 4 \\
        --gsm8k .gpu_assets/gsm8k_test.jsonl --cloze 300 --max-new-tokens 1024 --doc-tokens 512

What each model does (``--models``: ``base:<name or folder>`` is step 0; a checkpoint folder's step is in
its meta.json; steps must differ, they key evals.jsonl):

- as Challenger: up to ``--tasks`` valid tasks from the held-out documents (``--docs``, shuffled with
  ``--seed``; the same documents in the same order for every Challenger), with the recipe's own code
  (trainer.evaluate.challenger_tasks -> spice_tasks.challenge): its two-turn prompts, the run's spice
  section from RUN/config.yaml (formats, answer types, worked_example, gate.recall, the format turn's budget
  format_max_new_tokens, the task turn's task_max_new_tokens, else ``--max-new-tokens``), documents cut
  at ``--doc-tokens`` (default: the run's max_document_tokens, else 512),
  the run's temperature (default: rollout.temperature of RUN/config.yaml, else 1.0), one attempt per
  document per round, at most 3 rounds, a round taking twice as many documents as tasks are missing;
- as Reasoner: ``--answers`` answers to every Challenger's tasks (trainer.evaluate.reasoner_answers:
  SPICE's Reasoner prompt, graded by spice_tasks.is_correct), at the same temperature, greedy when
  ``--answers 1``; each answer gets ``--max-new-tokens`` (not the run's reasoner_max_new_tokens: one
  answer budget for the cross-play and the benchmarks);
- greedily, GSM8K (``--gsm8k`` JSONL, every item, scoring math, recorded as ``--gsm8k-name``) and the
  cloze set (``cloze_items`` over the held-out documents, ``--cloze`` items, ``--seed``; exact match;
  recorded as ``cloze-heldout``), each appended to RUN/evals.jsonl (``append_eval``, read by
  ``manage.py import_run``) with its samples in RUN/eval_samples/<benchmark>-step<N>.jsonl.

Each model is loaded once per pass and freed before the next. Pass 1 loads every model in turn: it
writes its tasks, answers the tasks written so far (its own included, in shared batches) and runs the
benchmarks; pass 2 loads again only the models that still owe answers to tasks written after them (with
base and final: the base answers the final Challenger's tasks), so k models cost at most 2k - 1 loads.

Outputs in RUN: crossplay.json (``write_crossplay``; pass rate and n answers per cell, rows = Challengers,
columns = Reasoners; rewritten after every cell, null where not done), crossplay_tasks.jsonl (every valid
task: challenger, question, answer, document id and title, whether the answer string occurs in the
document, and each Reasoner's pass rate on it, for judging groundedness), crossplay_state.jsonl (the
raw per-task results this script resumes from; a change of settings - documents, sizes, budgets,
temperature, seed, spice section - starts the cross-play afresh and leaves the old lines unused). Phase
results also go to $OUT/results.jsonl (common.emit). Printed last: the matrix with 95% bootstrap intervals
over tasks, the co-evolution signature (a fixed Reasoner against later Challengers, later Reasoners
against a fixed Challenger), the benchmark scores and the seconds per phase.

Resumable: a rerun of the same command skips finished Challengers, cells and benchmarks (a benchmark
already in evals.jsonl for that step is skipped). ``--time-limit S`` starts no new phase after S seconds
(a 10-minute machine call): exit 3 means work is left, rerun the same command. Exit 2: bad input, one
line on stderr (missing documents file, bad checkpoint, ...).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common import UsageError, emit, read_docs, run_cli  # (also puts the repository on sys.path)

STATE, TASKS_FILE, CLOZE_NAME = "crossplay_state.jsonl", "crossplay_tasks.jsonl", "cloze-heldout"
PHASES = ("load", "challenger", "reasoner", "gsm8k", "cloze")


class TimeUp(Exception):
    """--time-limit reached before a phase."""


@dataclass
class Target:
    spec: str  # as given
    ident: str  # the key of its state lines (a resolved path for a checkpoint)
    label: str  # "base" or "step N"
    step: int
    seconds: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))


# ---- inputs ---------------------------------------------------------------------------------------

def targets_of(specs: list[str]) -> list[Target]:
    """Each --models entry checked (and a base model resolved, i.e. imported once) before any is loaded."""
    from trainer.evaluate import ModelSpecError, describe_target
    from trainer.models import ModelNotFound, resolve_model

    out = []
    for spec in specs:
        try:
            target = describe_target(spec)
            if target["kind"] == "base":
                resolve_model(target["base"])
        except (ModelSpecError, ModelNotFound) as exc:
            raise UsageError(f"--models {spec}: {exc}") from None
        if target["kind"] == "base":
            out.append(Target(spec, spec, "base", 0))
            continue
        step = target.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise UsageError(f"--models {spec}: no step in its meta.json; give a checkpoint folder a run wrote "
                             "(RUN/checkpoints/step-N) or base:<model> for the base")
        out.append(Target(spec, str(Path(spec).expanduser().resolve()), f"step {step}", step))
    steps = Counter(t.step for t in out)
    twice = [s for s, n in steps.items() if n > 1]
    if twice:
        raise UsageError(f"--models: two models at step {twice[0]} "
                         f"({', '.join(t.spec for t in out if t.step == twice[0])}); evals.jsonl keys results by "
                         "step, so give each step once (the base is step 0)")
    return out


def run_config(run: Path) -> dict:
    path = run / "config.yaml"
    if not path.is_file():
        return {}
    import yaml

    try:
        cfg = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return cfg if isinstance(cfg, dict) else {}


def spice_settings(cfg: dict, doc_tokens: int | None):
    """The run's spice section, with this script's budgets (see the module docstring)."""
    from trainer.evaluate import spice_section

    spice = dict(cfg.get("spice") or {}) if cfg.get("method", "spice") == "spice" else {}
    try:
        section = spice_section(spice)
    except ValueError as exc:
        raise UsageError(f"the spice section of config.yaml is not valid: {str(exc).splitlines()[0]}") from None
    update = {"reasoner_max_new_tokens": None}  # answers: --max-new-tokens
    if doc_tokens is not None:
        update["max_document_tokens"] = doc_tokens
    elif not spice.get("max_document_tokens"):
        update["max_document_tokens"] = 512
    return section.model_copy(update=update)


def check_numbers(args) -> None:
    for name, low in (("tasks", 1), ("answers", 1), ("cloze", 0), ("max_new_tokens", 16), ("seed", 0)):
        if getattr(args, name) < low:
            raise UsageError(f"--{name.replace('_', '-')} must be at least {low}, got {getattr(args, name)}")
    if args.doc_tokens is not None and args.doc_tokens < 64:
        raise UsageError(f"--doc-tokens must be at least 64, got {args.doc_tokens}")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.temperature is not None and args.temperature <= 0:
        raise UsageError(f"--temperature must be above 0 (the Challenger samples), got {args.temperature}")
    from trainer.runfolder import BENCHMARK_NAME

    if not BENCHMARK_NAME.match(args.gsm8k_name):
        raise UsageError(f"--gsm8k-name must be lowercase letters, digits, - and _, got {args.gsm8k_name!r}")


# ---- state ----------------------------------------------------------------------------------------

class State:
    """crossplay_state.jsonl: "tasks" lines (a Challenger's tasks) and "cell" lines (a Reasoner's
    answers to them), of the current settings only."""

    def __init__(self, run: Path, key: str):
        self.path, self.key = run / STATE, key
        self.tasks: dict[str, dict] = {}
        self.cells: dict[tuple[str, str], dict] = {}
        self.other = 0
        if self.path.is_file():
            for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    print(f"{STATE} line {n}: not JSON (cut off by a stopped call?); ignored", flush=True)
                    continue
                if row.get("settings") != key:
                    self.other += 1
                elif row.get("kind") == "tasks":
                    self.tasks[row["challenger"]] = row
                elif row.get("kind") == "cell":
                    self.cells[(row["challenger"], row["reasoner"])] = row

    def add(self, row: dict) -> None:
        row = {"settings": self.key, **row}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if row["kind"] == "tasks":
            self.tasks[row["challenger"]] = row
        else:
            self.cells[(row["challenger"], row["reasoner"])] = row


def settings_key(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ---- the phases -----------------------------------------------------------------------------------

class Evaluation:
    def __init__(self, args, run: Path, targets: list[Target], docs: list, gsm_items, section, temperature: float,
                 recall: bool = False):
        from trainer.rollout import SamplingParams

        self.args, self.run, self.targets, self.docs = args, run, targets, docs
        self.gsm_items, self.section = gsm_items, section
        self.recall = recall  # the run's gate.recall: its Challengers are told it and held to it, as trained
        self.t0 = time.perf_counter()
        self.task_docs = list(docs)
        random.Random(args.seed).shuffle(self.task_docs)
        self.doc_text = {str(d.id): d.text for d in docs}
        self.challenger_sampling = SamplingParams(temperature=temperature, max_new_tokens=args.max_new_tokens,
                                                  logprobs=False)
        self.reasoner_sampling = SamplingParams(temperature=temperature if args.answers > 1 else 0.0,
                                                max_new_tokens=args.max_new_tokens, logprobs=False)
        self.greedy = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens, logprobs=False)
        settings = {"docs": str(Path(args.docs).resolve()), "documents": [str(d.id) for d in self.task_docs][:4096],
                    "tasks": args.tasks, "answers": args.answers, "max_new_tokens": args.max_new_tokens,
                    "temperature": temperature, "seed": args.seed, "spice": section.model_dump(mode="json")}
        self.state = State(run, settings_key(settings))
        if self.state.other:
            print(f"{STATE}: {self.state.other} lines of other settings are not used", flush=True)
        self._cloze = None

    # -- what is left -----------------------------------------------------------------------------
    def evaluated(self) -> set[tuple[int, str]]:
        from trainer.runfolder import read_evals

        return {(r["step"], r["benchmark"]) for r in read_evals(self.run)}

    def owed_cells(self, t: Target) -> list[Target]:
        """Challengers whose tasks ``t`` has yet to answer (tasks written, cell missing)."""
        return [c for c in self.targets if c.ident in self.state.tasks and self.state.tasks[c.ident]["tasks"]
                and (c.ident, t.ident) not in self.state.cells]

    def work(self, t: Target, done: set) -> list[str]:
        todo = ["challenger"] if t.ident not in self.state.tasks else []
        if todo or self.owed_cells(t):
            todo.append("reasoner")
        if self.gsm_items is not None and (t.step, self.args.gsm8k_name) not in done:
            todo.append("gsm8k")
        if self.args.cloze and (t.step, CLOZE_NAME) not in done:
            todo.append("cloze")
        return todo

    def check_time(self) -> None:
        if self.args.time_limit is not None and time.perf_counter() - self.t0 > self.args.time_limit:
            raise TimeUp

    # -- the loop ---------------------------------------------------------------------------------
    def run_all(self) -> bool:
        """True when everything is done; False when --time-limit stopped it."""
        try:
            for _ in range(2):  # see the module docstring: pass 2 only answers tasks written after a model
                for t in self.targets:
                    todo = self.work(t, self.evaluated())
                    if todo:
                        self.check_time()
                        self.serve(t, todo)
        except TimeUp:
            return False
        return True

    def serve(self, t: Target, todo: list[str]) -> None:
        import torch

        from trainer.evaluate import default_batch_size, load_model

        print(f"--- {t.label} ({t.spec}): {', '.join(todo)}", flush=True)
        start = time.perf_counter()
        try:
            loaded = load_model(t.spec)
        except Exception as exc:  # noqa: BLE001 - weights that do not load: one line, exit 2
            raise UsageError(f"--models {t.spec}: cannot load it ({type(exc).__name__}: {str(exc)[:300]})") from None
        t.seconds["load"] += time.perf_counter() - start
        emit("spice_eval_load", {"model": t.label, "seconds": round(time.perf_counter() - start, 1)})
        batch = self.args.batch_size or default_batch_size(loaded)
        try:
            for phase in todo:
                self.check_time()
                torch.manual_seed(self.args.seed)
                start = time.perf_counter()
                getattr(self, f"phase_{phase}")(t, loaded, batch)
                t.seconds[phase] += time.perf_counter() - start
        finally:
            del loaded
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def phase_challenger(self, t: Target, loaded, batch: int) -> None:
        from trainer.evaluate import challenger_tasks

        start, log = time.perf_counter(), []
        tasks, tried = challenger_tasks(loaded, self.task_docs, self.args.tasks, self.challenger_sampling,
                                        self.section, batch_size=batch, attempts_log=log, recall=self.recall)
        reasons = Counter(re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", r["reason"]) for r in log if not r["valid"])
        row = {"kind": "tasks", "challenger": t.ident, "label": t.label, "step": t.step, "attempts": tried,
               "valid": len(tasks), "truncated": sum(r["truncated"] for r in log),
               "mcq": sum(x["format"] == "mcq" for x in tasks), "reasons": dict(reasons.most_common(8)),
               "seconds": round(time.perf_counter() - start, 1), "tasks": tasks}
        self.state.add(row)
        self.write_outputs()
        emit("spice_eval_challenger", {k: v for k, v in row.items() if k not in ("tasks", "kind", "challenger")} |
             {"model": t.label, "examples": [f"{x['question'][:160]} -> {x['answer']}" for x in tasks[:3]]})

    def phase_reasoner(self, t: Target, loaded, batch: int) -> None:
        """Every owed cell of ``t`` in shared batches, then one state line per cell."""
        from trainer.evaluate import bootstrap_ci, reasoner_answers

        owed = self.owed_cells(t)
        if not owed:
            return
        start = time.perf_counter()
        tasks = [x for c in owed for x in self.state.tasks[c.ident]["tasks"]]
        details = reasoner_answers(loaded, tasks, self.reasoner_sampling, self.args.answers, self.section, batch)
        seconds = time.perf_counter() - start
        at = 0
        for c in owed:
            mine = details[at:at + len(self.state.tasks[c.ident]["tasks"])]
            at += len(mine)
            flat = [x for d in mine for x in d["correct"]]
            rate = sum(flat) / len(flat)
            lo, hi = bootstrap_ci([sum(d["correct"]) / len(d["correct"]) for d in mine])
            every = lambda key: [x for d in mine for x in d[key]]  # noqa: E731
            row = {"kind": "cell", "challenger": c.ident, "reasoner": t.ident, "pass_rate": rate, "n": len(flat),
                   "ci_low": lo, "ci_high": hi, "boxed_rate": sum(every("boxed")) / len(flat),
                   "truncated_rate": sum(every("truncated")) / len(flat),
                   "mean_tokens": sum(every("tokens")) / len(flat),
                   "seconds": round(seconds * len(mine) / len(tasks), 1),  # the shared batches' time, split by tasks
                   "correct": [d["correct"] for d in mine], "predictions": [d["predictions"] for d in mine]}
            self.state.add(row)
            emit("spice_eval_cell", {"challenger": c.label, "reasoner": t.label,
                                     **{k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()
                                        if k not in ("kind", "challenger", "reasoner", "correct", "predictions")}})
        self.write_outputs()

    def phase_gsm8k(self, t: Target, loaded, batch: int) -> None:
        self.benchmark(t, loaded, batch, self.args.gsm8k_name, self.gsm_items, "math")

    def phase_cloze(self, t: Target, loaded, batch: int) -> None:
        from trainer.evaluate import cloze_items

        if self._cloze is None:
            self._cloze = cloze_items(self.docs, self.args.cloze, seed=self.args.seed)
        self.benchmark(t, loaded, batch, CLOZE_NAME, self._cloze, "exact")

    def benchmark(self, t: Target, loaded, batch: int, name: str, items, scoring: str) -> None:
        from trainer.evaluate import evaluate
        from trainer.runfolder import append_eval, write_eval_samples

        result = evaluate(loaded.generator, loaded.tokenizer, items, scoring, sampling=self.greedy, batch_size=batch,
                          name=name)
        outputs = [s["output"] or "" for s in result.samples]
        tokens = sum(len(ids) for ids in loaded.tokenizer(outputs, add_special_tokens=False)["input_ids"]) if outputs else 0
        row = append_eval(self.run, {
            "step": t.step, "checkpoint": t.spec, "benchmark": name, "scoring": scoring, "n": result.n,
            "score": result.score, "ci_low": result.ci_low, "ci_high": result.ci_high, "seconds": result.seconds,
            "correct": result.correct, "model": t.label, "max_new_tokens": self.args.max_new_tokens,
            "boxed_rate": sum("\\boxed{" in o for o in outputs) / max(1, len(outputs)),
            "tokens_per_s": tokens / max(result.seconds, 1e-9)})
        write_eval_samples(self.run, name, t.step, result.samples)
        emit("spice_eval_benchmark", {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})

    # -- outputs ----------------------------------------------------------------------------------
    def matrix(self) -> tuple[list[list], list[list]]:
        rates = [[None] * len(self.targets) for _ in self.targets]
        ns = [[0] * len(self.targets) for _ in self.targets]
        for i, c in enumerate(self.targets):
            for j, r in enumerate(self.targets):
                cell = self.state.cells.get((c.ident, r.ident))
                if cell is not None:
                    rates[i][j], ns[i][j] = cell["pass_rate"], cell["n"]
        return rates, ns

    def write_outputs(self) -> None:
        """crossplay.json and crossplay_tasks.jsonl from the state."""
        from trainer.runfolder import write_crossplay

        labels, steps = [t.label for t in self.targets], [t.step for t in self.targets]
        rates, ns = self.matrix()
        write_crossplay(self.run, labels, labels, steps, steps, rates, ns)
        lines = []
        for c in self.targets:
            row = self.state.tasks.get(c.ident)
            for k, task in enumerate(row["tasks"] if row else []):
                solved = {}
                for r in self.targets:
                    cell = self.state.cells.get((c.ident, r.ident))
                    if cell is not None:
                        solved[r.label] = sum(cell["correct"][k]) / len(cell["correct"][k])
                lines.append({"challenger": c.label, "step": c.step, "index": k, **task,
                              "answer_in_document": answer_in_document(task, self.doc_text.get(task["document_id"], "")),
                              "solved": solved})
        tmp = self.run / f".{TASKS_FILE}.tmp"
        tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        tmp.replace(self.run / TASKS_FILE)

    def report(self) -> None:
        from trainer.runfolder import read_evals

        labels = [t.label for t in self.targets]
        width = max(24, *(len(x) + 14 for x in labels))
        print("\ncross-play pass rate: rows = Challenger (its valid tasks / attempts), columns = Reasoner; "
              "[95% bootstrap interval over tasks] n answers, boxed share, cut-off share")
        print(" " * width + "".join(f"{x:<44}" for x in labels))
        for c in self.targets:
            made = self.state.tasks.get(c.ident)
            head = f"{c.label} ({made['valid']}/{made['attempts']})" if made else f"{c.label} (no tasks yet)"
            cells = []
            for r in self.targets:
                cell = self.state.cells.get((c.ident, r.ident))
                cells.append(f"{cell['pass_rate']:.3f} [{cell['ci_low']:.2f}, {cell['ci_high']:.2f}] n={cell['n']} "
                             f"b{cell['boxed_rate']:.2f} c{cell['truncated_rate']:.2f}" if cell else
                             ("no tasks" if made and not made["tasks"] else "-"))
            print(f"{head:<{width}}" + "".join(f"{x:<44}" for x in cells))
        rates, _ = self.matrix()
        if len(self.targets) > 1:
            first, last = 0, len(self.targets) - 1
            pairs = [(f"Reasoner {labels[j]} vs Challenger {labels[first]} -> {labels[last]}", rates[first][j],
                      rates[last][j], "falls") for j in (first, last)]
            pairs += [(f"Challenger {labels[i]} vs Reasoner {labels[first]} -> {labels[last]}", rates[i][first],
                       rates[i][last], "rises") for i in (first, last)]
            print("\nco-evolution signature (SPICE: a fixed Reasoner's pass rate falls against later Challengers; "
                  "later Reasoners' rises against a fixed Challenger):")
            for what, a, b, want in pairs:
                delta = f"{100 * (b - a):+.1f} points" if a is not None and b is not None else "n/a"
                print(f"  {what}: {_pct(a)} -> {_pct(b)} ({delta}; SPICE: {want})")
        evals = {(r["step"], r["benchmark"]): r for r in read_evals(self.run)}
        names = ([self.args.gsm8k_name] if self.gsm_items is not None else []) + ([CLOZE_NAME] if self.args.cloze else [])
        if names:
            print("\nbenchmarks (greedy; score [95% bootstrap interval] n):")
            print(f"{'model':<{width}}" + "".join(f"{x:<34}" for x in names))
            for t in self.targets:
                cells = [f"{r['score']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] n={r['n']}"
                         if (r := evals.get((t.step, name))) else "-" for name in names]
                print(f"{t.label:<{width}}" + "".join(f"{x:<34}" for x in cells))
        print("\nseconds per phase (this evaluation):")
        print(f"{'model':<{width}}" + "".join(f"{p:>12}" for p in PHASES) + f"{'total':>12}")
        for t in self.targets:
            print(f"{t.label:<{width}}" + "".join(f"{t.seconds[p]:>12.1f}" for p in PHASES)
                  + f"{sum(t.seconds.values()):>12.1f}")
        print(f"wall clock {time.perf_counter() - self.t0:.1f} s")


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def answer_in_document(task: dict, text: str) -> bool | None:
    """Does the gold answer occur in the document (case and thousands separators ignored)? None for
    MCQ and true/false answers. A hint for the reader, not a check: a computed answer need not occur."""
    if task["format"] == "mcq" or task["answer_type"] == "boolean":
        return None
    norm = lambda s: re.sub(r"(?<=\d),(?=\d{3})", "", s.lower())  # noqa: E731
    return norm(str(task["answer"])) in norm(text)


# ---- command line ---------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="the run folder (config.yaml ...): results are written into it")
    ap.add_argument("--models", nargs="+", required=True, metavar="MODEL",
                    help="base:<name or folder> (step 0) and checkpoint folders (RUN/checkpoints/step-N)")
    ap.add_argument("--docs", required=True, help="held-out documents, JSONL (id, title, text)")
    ap.add_argument("--tasks", type=int, default=128, help="valid tasks per Challenger, at most")
    ap.add_argument("--answers", type=int, default=4, help="Reasoner answers per task (1 = greedy)")
    ap.add_argument("--gsm8k", metavar="JSONL", help="GSM8K test as JSONL (every item is evaluated)")
    ap.add_argument("--gsm8k-name", default="gsm8k", help="its benchmark name in evals.jsonl")
    ap.add_argument("--cloze", type=int, default=300, help="held-out cloze items (0: none)")
    ap.add_argument("--max-new-tokens", type=int, default=1024, help="budget of each answer (and of the task turn "
                    "when the run sets no spice.task_max_new_tokens)")
    ap.add_argument("--doc-tokens", type=int, help="documents cut at this many tokens (default: the run's "
                    "spice.max_document_tokens, else 512)")
    ap.add_argument("--temperature", type=float, help="sampling temperature (default: the run's "
                    "rollout.temperature, else 1.0)")
    ap.add_argument("--batch-size", type=int, help="sequences per generate call (default: "
                    "trainer.evaluate.default_batch_size: 256 on a GPU, 16 on a CPU)")
    ap.add_argument("--seed", type=int, default=0, help="document order, cloze set, sampling")
    ap.add_argument("--time-limit", type=float, help="start no phase after this many seconds (exit 3)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    return run_cli(evaluate_all, parse_args(argv))


def evaluate_all(args) -> int:
    """The whole evaluation: 0 when done, 3 when --time-limit left work (bad input: UsageError, exit 2)."""
    check_numbers(args)
    run = Path(args.run).expanduser()
    if not run.is_dir():
        raise UsageError(f"--run {run} is not a folder; give the run folder (python -m trainer run ... --out DIR)")
    from trainer.evaluate import BenchmarkError, load_benchmark

    docs = read_docs(args.docs)
    gsm_items = None
    if args.gsm8k:
        try:
            gsm_items, _ = load_benchmark(args.gsm8k, "math")
        except BenchmarkError as exc:
            raise UsageError(f"--gsm8k: {exc}") from None
    cfg = run_config(run)
    section = spice_settings(cfg, args.doc_tokens)
    temperature = args.temperature or float((cfg.get("rollout") or {}).get("temperature") or 1.0)
    targets = targets_of(args.models)
    evaluation = Evaluation(args, run, targets, docs, gsm_items, section, temperature,
                            recall=bool((cfg.get("gate") or {}).get("recall", False)))
    print(f"{len(targets)} models, {len(docs)} held-out documents, {args.tasks} tasks x {args.answers} answers, "
          f"temperature {temperature}, documents cut at {section.max_document_tokens} tokens, "
          f"Challenger turns {section.format_max_new_tokens} + {section.task_max_new_tokens or args.max_new_tokens}"
          f" tokens, answers {args.max_new_tokens} tokens", flush=True)
    done = evaluation.run_all()
    evaluation.write_outputs()
    evaluation.report()
    if not done:
        print("time limit reached with work left: rerun the same command to continue")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
