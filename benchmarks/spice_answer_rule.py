"""How many tasks SPICE's "answer repeated across documents" rule (``gate.mark_repeated_answers``) marks.

1. Held-out tasks (``crossplay_tasks.jsonl`` of a run folder): each Challenger's set is treated as one step (one task
   per document there). Per Challenger: tasks, free-form tasks, marked by the rule alone, marked by
   ``mark_repeated`` (question rule) alone, and invalid after both in the recipe's order (question rule first).
2. Training tasks (``samples.jsonl``; only the first steps are kept in the shipped run folders): the rule on each
   recorded step (16 documents x 8 attempts), and on bootstrapped 16-document steps drawn from those documents, with
   the rule's split count (a document weighs 1 over its valid free-form tasks) and, for comparison, a whole count
   (a document counts 1 for every answer any of its attempts gives).

    python benchmarks/spice_answer_rule.py RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import argparse
import json
import random
from collections import Counter, defaultdict
from pathlib import Path

from trainer.methods.gate import MIN_ANSWER_DOCUMENTS, _answer_key, mark_repeated, mark_repeated_answers
from trainer.methods.spice_tasks import Attempt, SpiceTask


def attempt(row: dict, i: int, valid: bool = True) -> Attempt:
    task = SpiceTask(row["format"], row.get("answer_type") or row["data"]["answer_type"], row["question"],
                     row["answer"])
    return Attempt(row["document_id"], "", i, f"{row['document_id']}:{i}", [1], task=task,
                   reason="" if valid else "task: another rule")


def held_out(run: Path, share: float) -> list[dict]:
    by_challenger = defaultdict(list)
    for line in (run / "crossplay_tasks.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_challenger[row["challenger"]].append(row)
    out = []
    for name, rows in by_challenger.items():
        alone = [attempt(r, i) for i, r in enumerate(rows)]
        questions = [attempt(r, i) for i, r in enumerate(rows)]
        both = [attempt(r, i) for i, r in enumerate(rows)]
        mark_repeated(questions)
        mark_repeated(both)
        mark_repeated_answers(both, share)
        marked = mark_repeated_answers(alone, share)
        answers = Counter(a.task.answer for a in alone if a.reason)
        out.append({"run": run.name, "challenger": name, "tasks": len(rows),
                    "documents": len({r["document_id"] for r in rows}),
                    "free_form": sum(r["format"] != "mcq" for r in rows), "answer_rule": marked,
                    "question_rule": sum(not a.valid for a in questions), "either": sum(not a.valid for a in both),
                    "marked_answers": dict(answers.most_common(4))})
    return out


def training_documents(run: Path) -> dict[tuple, list]:
    """(step, document) -> the answer keys of its valid free-form tasks, for every document of a recorded step."""
    docs: dict[tuple, list] = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") != "task":
            continue
        keys = docs.setdefault((row["step"], row["document_id"]), [])
        if row["valid"] and row["format"] != "mcq":
            keys.append(_answer_key(SpiceTask(row["format"], row["data"]["answer_type"], "", row["answer"])))
    return docs


def marks(step_docs: list[list], share: float, whole: bool) -> int:
    """Tasks marked in one step given each document's answer keys; ``whole``: a document counts 1 for each answer."""
    n = len(step_docs)
    weight, present = Counter(), Counter()
    for keys in step_docs:
        for k in set(keys):
            present[k] += 1
        for k in keys:
            weight[k] += 1 / len(keys)
    counted = present if whole else weight
    hit = {k for k in present if present[k] >= MIN_ANSWER_DOCUMENTS and counted[k] > share * n + 1e-9}
    return sum(k in hit for keys in step_docs for k in keys)


def prompts_per_step(run: Path) -> int | None:
    """train.prompts_per_step from the run's config.yaml (a step with fewer documents was cut off in samples.jsonl)."""
    for line in (run / "config.yaml").read_text().splitlines() if (run / "config.yaml").exists() else []:
        if line.strip().startswith("prompts_per_step:"):
            return int(line.split(":")[1])
    return None


def training(runs: list[Path], share: float, size: int, trials: int, max_step: int) -> None:
    pool = []
    for run in runs:
        if not (run / "samples.jsonl").exists():
            continue
        docs, full = training_documents(run), prompts_per_step(run)
        for step in sorted({s for s, _ in docs}):
            step_docs = [keys for (s, _), keys in docs.items() if s == step]
            whole, split = marks(step_docs, share, True), marks(step_docs, share, False)
            tasks = sum(map(len, step_docs))
            cut = f" (of {full}: the file ends inside this step)" if full and len(step_docs) < full else ""
            print(f"  {run.name} step {step}: {len(step_docs)} documents{cut}, {tasks} valid free-form tasks; "
                  f"marked split {split}, whole {whole}")
            if step <= max_step:
                pool += step_docs
    if len(pool) < size:
        print(f"\nbootstrapped steps: skipped, the recorded steps hold {len(pool)} documents with valid free-form "
              f"tasks (< {size}); pass run folders whose samples.jsonl keeps more of them")
        return
    rng = random.Random(0)
    steps = {True: 0, False: 0}
    tasks = {True: 0, False: 0}
    total, top = 0, []
    for _ in range(trials):
        step_docs = rng.sample(pool, size)
        total += sum(map(len, step_docs))
        for whole in (True, False):
            m = marks(step_docs, share, whole)
            steps[whole] += m > 0
            tasks[whole] += m
        weight = Counter()
        for keys in step_docs:
            for k in keys:
                weight[k] += 1 / len(keys)
        top.append(max(weight.values(), default=0) / size)
    top.sort()
    print(f"  bootstrap: {trials} steps of {size} documents from {len(pool)} documents of steps <= {max_step}: "
          f"steps with a mark split {steps[False] / trials:.1%} whole {steps[True] / trials:.1%}; "
          f"tasks marked split {tasks[False] / total:.2%} whole {tasks[True] / total:.2%}; most common answer's "
          f"split share median {top[trials // 2]:.1%}, 99th percentile {top[int(trials * 0.99)]:.1%}, "
          f"largest {top[-1]:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--share", type=float, default=0.25, help="spice.max_answer_share")
    parser.add_argument("--bootstrap-documents", type=int, default=16)
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--max-step", type=int, default=3, help="training steps pooled for the bootstrap")
    args = parser.parse_args()
    print("| run | Challenger | tasks (free-form) | answer rule | question rule | either | answers marked |")
    print("|---|---|---|---|---|---|---|")
    for run in args.runs:
        for r in held_out(run, args.share):
            print(f"| {r['run']} | {r['challenger']} | {r['tasks']} ({r['free_form']}) | {r['answer_rule']} | "
                  f"{r['question_rule']} | {r['either']} | {r['marked_answers'] or '-'} |")
    print("training steps:")
    training(args.runs, args.share, args.bootstrap_documents, args.trials, args.max_step)


if __name__ == "__main__":
    main()
