"""Re-score run folders' recorded evaluations with the current grader (issue 35: the old grader's text
shortcut dropped the sign, the decimal point and the slash before numbers were compared).

For each run folder (default: every folder of examples/runs) and each eval_samples/<benchmark>-step<N>.jsonl
file, every item's stored ``prediction`` is scored again against its ``gold`` with
``trainer.evaluate.score_prediction`` (the scoring the evals.jsonl line names; judge items are kept as they
are); the file's ``score``/``correct`` and the matching evals.jsonl line (score, its 95% bootstrap interval,
``correct``) are rewritten. The line keeps the old score as ``score_before_rescore`` so the change stays
visible. An evals.jsonl line with no samples file cannot be re-scored (the predictions were not kept) and is
reported as such.

It prints, per folder, each re-scored line's score before and after and, for each checkpoint with a step-0
samples file on the same benchmark, the paired difference (``trainer.evaluate.paired_difference``: the mean
per-item difference on the same items and its 95% interval) before and after. ``--check`` writes nothing and
exits 1 when a stored score differs from the current grader's (tests/trainer/test_rescore_runs.py runs it on
the shipped folders)::

    python benchmarks/rescore_runs.py                 # re-score examples/runs/*, write the files
    python benchmarks/rescore_runs.py --check RUN...  # report only; exit 1 if anything would move
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.evaluate import bootstrap_ci, paired_difference, score_prediction  # noqa: E402
from trainer.runfolder import EVALS, eval_sample_files, iter_jsonl, read_eval_samples  # noqa: E402

RULE_BASED = ("math", "mcq", "exact", "f1")


def _key_of(samples: list[dict]) -> str:
    ids = [s["id"] for s in samples]
    return "id" if all(ids) and len(set(ids)) == len(ids) else "index"


def rescore_samples(samples: list[dict], scoring: str) -> tuple[list[dict], int]:
    """The samples with score/correct from the current grader (judge items as they were), and how many changed."""
    out, changed = [], 0
    for s in samples:
        mode = s.get("scoring") or scoring
        if mode not in RULE_BASED:
            out.append(s)
            continue
        score = float(score_prediction(s["prediction"], s["gold"], mode))
        changed += score != s["score"]
        out.append({**s, "score": score, "correct": score >= 1.0})
    return out, changed


def _dump_like(original: str, obj: dict) -> str:
    """``obj`` as JSON written the way ``original`` was (ASCII-escaped or not), so unchanged text stays as it was."""
    for ascii_only in (True, False):
        if json.dumps(json.loads(original), ensure_ascii=ascii_only) == original:
            return json.dumps(obj, ensure_ascii=ascii_only)
    return json.dumps(obj)


def _rewrite_changed_lines(path: Path, samples: list[dict]) -> None:
    """Rewrite the lines of ``path`` whose score or correct changed (matched by index); the others stay byte for byte."""
    by_index = {s["index"]: s for s in samples}
    out = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        body = line.rstrip("\n")
        if body.strip():
            row = json.loads(body)
            new = by_index.get(row.get("index"))
            if new is not None and (row.get("score") != new["score"] or row.get("correct", row.get("score") == 1.0)
                                    != new["correct"]):
                line = _dump_like(body, {**row, "score": new["score"], "correct": new["correct"]}) + "\n"
        out.append(line)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(out), encoding="utf-8")
    tmp.replace(path)


def _rounded(x: float) -> float:
    return round(float(x), 4)


def rescore_folder(folder: Path, write: bool) -> dict:
    """Re-score one run folder; returns {"lines": [...], "paired": [...], "not_rescorable": [...]}."""
    evals_path = folder / EVALS
    rows = [row for _, row in iter_jsonl(evals_path)] if evals_path.is_file() else []
    files = {(b, step): path for b, step, path in eval_sample_files(folder)}
    report = {"folder": folder.name, "lines": [], "paired": [], "not_rescorable": []}
    before_items, after_items = {}, {}
    for (benchmark, step), path in files.items():
        line = next((i for i in range(len(rows) - 1, -1, -1)
                     if rows[i].get("step") == step and rows[i].get("benchmark") == benchmark), None)
        scoring = rows[line]["scoring"] if line is not None else "math"
        old = read_eval_samples(path)
        new, changed = rescore_samples(old, scoring)
        key = _key_of(old)
        before_items[(benchmark, step)] = {s[key]: s["score"] for s in old}
        after_items[(benchmark, step)] = {s[key]: s["score"] for s in new}
        scores = [s["score"] for s in new]
        score = sum(scores) / len(scores) if scores else 0.0
        lo, hi = bootstrap_ci(scores)
        before = rows[line]["score"] if line is not None else None
        entry = {"benchmark": benchmark, "step": step, "n": len(new), "items_changed": changed,
                 "before": before, "after": score if changed or before is None else before}
        report["lines"].append(entry)
        if line is not None and changed:
            record = dict(rows[line])
            record.setdefault("score_before_rescore", record["score"])
            keep = _rounded if record["score"] == _rounded(record["score"]) else float  # the line's own precision
            record.update(score=keep(score), ci_low=keep(min(lo, score)), ci_high=keep(max(hi, score)))
            if "correct" in record:
                record["correct"] = int(sum(s["correct"] for s in new))
            rows[line] = record
        if write and changed:
            _rewrite_changed_lines(path, new)
    for (benchmark, step) in sorted(files):
        if step == 0 or (benchmark, 0) not in files:
            continue
        pb = paired_difference(before_items[(benchmark, 0)], before_items[(benchmark, step)])
        pa = paired_difference(after_items[(benchmark, 0)], after_items[(benchmark, step)])
        report["paired"].append({"benchmark": benchmark, "step": step, "before": pb, "after": pa})
    covered = set(files)
    report["not_rescorable"] = sorted({(r.get("benchmark"), r.get("step")) for r in rows
                                       if (r.get("benchmark"), r.get("step")) not in covered})
    if write and rows:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if text != evals_path.read_text(encoding="utf-8"):
            tmp = evals_path.with_name(f".{evals_path.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(evals_path)
    return report


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _pd(p) -> str:
    if p is None:
        return "-"
    return f"{100 * p['diff']:+.1f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}] (n={p['n']})"


def print_report(report: dict) -> None:
    print(f"== {report['folder']}")
    for e in report["lines"]:
        moved = "" if e["before"] is None or abs(e["before"] - e["after"]) < 5e-5 else "   MOVED"
        print(f"   {e['benchmark']} step {e['step']}: {_pct(e['before'])} -> {_pct(e['after'])} "
              f"({e['items_changed']} of {e['n']} items changed){moved}")
    for p in report["paired"]:
        print(f"   paired {p['benchmark']} step {p['step']} - step 0: {_pd(p['before'])} -> {_pd(p['after'])}")
    if report["not_rescorable"]:
        print("   no samples kept (not re-scorable): "
              + ", ".join(f"{b} step {s}" for b, s in report["not_rescorable"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", help="run folders (default: examples/runs/*)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a stored score would change")
    args = parser.parse_args(argv)
    folders = [Path(f) for f in args.folders] or sorted(p for p in (ROOT / "examples" / "runs").iterdir() if p.is_dir())
    moved = 0
    for folder in folders:
        report = rescore_folder(folder, write=not args.check)
        print_report(report)
        moved += sum(e["items_changed"] for e in report["lines"])
    if args.check and moved:
        print(f"{moved} stored item scores differ from the current grader: run python benchmarks/rescore_runs.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
