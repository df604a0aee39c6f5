"""How many consensus readers does the task gate need? (issue 30: "choose n by measurement")

The gate's consensus rule (trainer/methods/gate.py) has a reader that sees the document answer a task
``gate.consensus_samples`` times (default 5, chosen from this measurement; 3 before) and keeps the task only when
a strict majority agrees with the writer's answer. More readers decide more surely and cost more generation. This measures the trade on real tasks:
every task is read K times (K large, e.g. 15), and for each smaller odd n the chance that n readers drawn from those
K reach the same verdict as all K is computed exactly (hypergeometric: n of the K answers without replacement).

Three steps, the middle one on a GPU with the run's model (from the repository root)::

    python benchmarks/gpu/consensus_n.py tasks --run RUN_DIR [--run ...] --docs .gpu_assets/wiki.jsonl --out tasks.jsonl
    python -m trainer gate tasks.jsonl --model MODEL --answers 1 --set gate.consensus_samples=15 \\
        --set gate.guess_probe=false --max-new-tokens 512 > verdicts.jsonl
    python benchmarks/gpu/consensus_n.py table verdicts.jsonl --k 15

``tasks`` takes the tasks a SPICE run's Challenger wrote that the gate's model-free rules passed (the ones the
reader is asked about: kept, with a parsed question and answer), with their documents, from each run folder's
samples.jsonl. ``table`` prints, for n = 1, 3, 5, ...: the mean agreement with the K-reader verdict, the share of
tasks whose n-reader verdict is wrong more than 10% of the time, and n's cost relative to 3; then the smallest n
whose mean agreement reaches ``--target`` (default 0.95). A task's reader agreement comes from the gate command's
``reader_agreement`` (agreeing answers / K).
"""
from __future__ import annotations

import argparse
import json
import sys
from math import comb
from pathlib import Path

from common import UsageError, read_docs, run_cli  # noqa: E402 (also puts the repository on sys.path)

from trainer.runfolder import RunFolderError, iter_jsonl  # noqa: E402


def majority_chance(k: int, agree: int, n: int) -> float:
    """P(a strict majority of n answers drawn without replacement from k, ``agree`` of which agree, agree).

    >>> majority_chance(3, 2, 1), majority_chance(15, 15, 5), majority_chance(4, 2, 3)
    (0.6666666666666666, 1.0, 0.5)
    """
    if not 0 <= agree <= k or not 1 <= n <= k:
        raise ValueError(f"need 0 <= agree <= k and 1 <= n <= k, got k={k} agree={agree} n={n}")
    total = comb(k, n)
    return sum(comb(agree, j) * comb(k - agree, n - j) for j in range(n // 2 + 1, n + 1)) / total


def agreement(k: int, agree: int, n: int) -> float:
    """How often n of the k readers reach the verdict all k reach (valid when a strict majority agrees)."""
    p = majority_chance(k, agree, n)
    return p if 2 * agree > k else 1.0 - p


def table(counts: list[int], k: int, ns: list[int]) -> list[dict]:
    """One row per n: mean agreement with the k-reader verdict over the tasks, the share of tasks decided
    wrongly more than 10% of the time, and the cost relative to the default 3 readers."""
    rows = []
    for n in ns:
        per_task = [agreement(k, c, n) for c in counts]
        rows.append({"n": n, "agreement": sum(per_task) / len(per_task),
                     "unsure_tasks": sum(a < 0.9 for a in per_task) / len(per_task), "cost_vs_3": n / 3})
    return rows


def read_counts(path: str, k: int) -> list[int]:
    """Agreeing answers per task (of k) from the gate command's JSON lines (``reader_agreement``)."""
    counts = []
    for n, row in _rows(path):
        if row.get("reader_agreement") is None:
            continue  # a task without a document was not read
        share = float(row["reader_agreement"])
        c = round(share * k)
        if abs(c - share * k) > 1e-6:
            raise UsageError(f"{path}:{n}: reader_agreement {share} is not a multiple of 1/{k}; was the gate run "
                             f"with --set gate.consensus_samples={k}?")
        counts.append(c)
    if not counts:
        raise UsageError(f"{path}: no line has a reader_agreement; run `python -m trainer gate ... --model M` with "
                         "documents in the task file")
    return counts


def _rows(path: str | Path):
    try:
        yield from iter_jsonl(path)
    except RunFolderError as exc:
        raise UsageError(str(exc)) from None


def make_tasks(runs: list[str], docs_path: str) -> list[dict]:
    """The tasks each run's Challenger wrote that reached the reader (kept, parsed), with their documents."""
    docs = {str(d.id): d for d in read_docs(docs_path)}
    out, missing = [], 0
    for run in runs:
        for _, r in _rows(Path(run) / "samples.jsonl"):
            data = r.get("data") or {}
            if r.get("kind") != "task" or not r.get("question") or not r.get("answer") or data.get("reader_agrees") is None:
                continue
            doc = docs.get(str(r.get("document_id")))
            if doc is None:
                missing += 1
                continue
            out.append({"question": r["question"], "answer": r["answer"], "document": doc.text, "title": doc.title,
                        "document_id": str(r["document_id"]), "format": r.get("format") or "free_form",
                        "answer_type": data.get("answer_type"), "step": f"{Path(run).name}:{r.get('step')}"})
    if missing:
        print(f"{missing} task(s) skipped: their document is not in {docs_path}", file=sys.stderr)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tasks", help="a gate task file from run folders' samples")
    t.add_argument("--run", action="append", required=True)
    t.add_argument("--docs", required=True, help="the corpus JSONL the runs drew documents from (id, title, text)")
    t.add_argument("--out", required=True)
    s = sub.add_parser("table", help="agreement of n readers with k, from the gate command's output")
    s.add_argument("verdicts")
    s.add_argument("--k", type=int, required=True, help="gate.consensus_samples of the gate run")
    s.add_argument("--n", default=None, help="comma-separated reader counts (default: the odd numbers below k)")
    s.add_argument("--target", type=float, default=0.95)
    args = p.parse_args(argv)
    return run_cli(tasks_cmd if args.cmd == "tasks" else table_cmd, args)


def tasks_cmd(args) -> int:
    tasks = make_tasks(args.run, args.docs)
    Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in tasks), encoding="utf-8")
    print(json.dumps({"tasks": len(tasks), "out": args.out}))
    return 0


def table_cmd(args) -> int:
    ns = [int(x) for x in args.n.split(",")] if args.n else list(range(1, args.k, 2))
    if any(not 1 <= n <= args.k for n in ns):
        raise UsageError(f"--n values must lie in 1..{args.k}")
    counts = read_counts(args.verdicts, args.k)
    rows = table(counts, args.k, ns)
    print(f"{len(counts)} tasks, {args.k} readers each; verdict of all {args.k}: "
          f"{sum(2 * c > args.k for c in counts) / len(counts):.1%} valid")
    print(f"{'n':>3} {'agreement':>10} {'unsure tasks':>13} {'cost vs 3':>10}")
    for r in rows:
        print(f"{r['n']:>3} {r['agreement']:>10.3f} {r['unsure_tasks']:>13.1%} {r['cost_vs_3']:>10.2f}")
    enough = next((r["n"] for r in rows if r["agreement"] >= args.target), None)
    print(json.dumps({"smallest_n_reaching_target": enough, "target": args.target, "tasks": len(counts), "k": args.k}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
