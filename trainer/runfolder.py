"""A standalone run folder, read back: its files, their line formats, and the evaluation files
that scripts add after the run (no Django; ``manage.py import_run`` loads a folder into the web).

``python -m trainer run CONFIG --out DIR`` writes (trainer/runner.py, trainer/sink.py)::

    DIR/config.yaml          the full resolved config                                  (required)
    DIR/metrics.jsonl        {"step": int, "role": str, <metric>: number, ...} per report (required)
    DIR/samples.jsonl        sample records (trainer/sink.py: task, attempt, rubric, grade, event)
    DIR/checkpoints.jsonl    {"step": int, "path": str} per checkpoint written
    DIR/checkpoints/step-*/  the weights (not needed to import: a GPU run's weights stay there)

Checkpoint evaluations, added by evaluation scripts (``append_eval``, ``write_crossplay``, or
``python -m trainer.evaluate CKPT --benchmark B --record DIR``)::

    DIR/evals.jsonl     one line per (checkpoint, benchmark):
                        {"step": int (0 = the base model), "checkpoint": str, "benchmark": str,
                         "scoring": str, "n": int, "score": float, "ci_low": float, "ci_high": float,
                         "seconds": float, "train_seconds": float (optional)}
    DIR/crossplay.json  {"challengers": [labels], "reasoners": [labels],
                         "steps_challenger": [ints], "steps_reasoner": [ints],
                         "pass_rate": [[float|null]], "n": [[int]]}
                        rows = challengers, columns = reasoners (SPICE Figure 3).
    DIR/eval_samples/<benchmark>-step<N>.jsonl   (optional) the items behind one evals.jsonl line,
                        one per line (``write_eval_samples``; trainer.evaluate.evaluate's samples):
                        {"index": int, "score": float in [0, 1], "id": str (optional),
                         "question", "gold" (str or [aliases]), "prediction" (str|null), "output",
                         "correct": bool (optional; default score == 1), ...}

``benchmark`` is a name of lowercase letters, digits, ``-`` and ``_`` (the web's benchmark names).
A bundled name (``gsm8k``) means items of that set from the first (``n`` says how many); name a
slice of your own (``gsm8k-660-1318``) when it is another part of the set. ``score``, ``ci_low``
and ``ci_high`` are fractions in [0, 1] (the mean sample score and its 95% bootstrap interval);
``n`` is the number of items scored. A later line for the same (step, benchmark) replaces an
earlier one, so re-evaluating a checkpoint is appending again. ``pass_rate[i][j]`` is the share
of correct answers of reasoner j on challenger i's tasks (null: not computed, or no valid task),
``n[i][j]`` how many answers it counts. ``train_seconds`` (optional; benchmarks/gpu/learn_run.py and
trl_gsm8k.py write it) is the run's summed training seconds when the checkpoint was saved (0 for
the base model): the web's compare view plots the scores against it (time to accuracy).
An eval_samples file lets the web pair a checkpoint's items with the base model's (step 0) on the
same benchmark: the mean per-item difference and its 95% interval (``trainer.evaluate.paired_difference``),
matched by ``id`` when every item has a distinct one, else by ``index``. Its ``<benchmark>`` and
``<N>`` name a line of evals.jsonl; a re-evaluation rewrites the file whole.

Every reader raises ``RunFolderError`` whose message names the file and line and what to fix.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterator

from trainer.sink import SAMPLE_KINDS
from trainer.verify import SCORING

REQUIRED = ("config.yaml", "metrics.jsonl")
OPTIONAL = ("samples.jsonl", "checkpoints.jsonl", "evals.jsonl", "crossplay.json", "eval_samples/")
EVALS, CROSSPLAY, EVAL_SAMPLES = "evals.jsonl", "crossplay.json", "eval_samples"
BENCHMARK_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
EVAL_SAMPLES_FILE = re.compile(rf"(?P<benchmark>{BENCHMARK_NAME.pattern.strip('^$')})-step(?P<step>[0-9]+)\.jsonl")
EVAL_FIELDS = {"step": int, "checkpoint": str, "benchmark": str, "scoring": str, "n": int, "score": float,
               "ci_low": float, "ci_high": float, "seconds": float}
CROSSPLAY_FIELDS = ("challengers", "reasoners", "steps_challenger", "steps_reasoner", "pass_rate", "n")


class RunFolderError(ValueError):
    """A folder that is not a run folder, or a file in it that cannot be read; the message says what to fix."""


# ---- the folder and its JSONL files -------------------------------------------------------------

def check_run_folder(run_dir: str | Path) -> Path:
    """The folder as a Path; RunFolderError naming every missing required file."""
    folder = Path(run_dir).expanduser()
    if not folder.is_dir():
        raise RunFolderError(f"{folder} is not a folder; give the folder a run wrote "
                             "(python -m trainer run CONFIG --out DIR)")
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        present = sorted(p.name for p in folder.iterdir())[:12]
        raise RunFolderError(
            f"{folder} is not a run folder: it has no {' and no '.join(missing)} (a run folder written by "
            f"`python -m trainer run CONFIG --out DIR` holds {', '.join(REQUIRED + OPTIONAL[:2])}); "
            f"it holds: {', '.join(present) or 'nothing'}")
    return folder


def iter_jsonl(path: str | Path, name: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line; RunFolderError names the file (``name``, default its
    file name) and the bad line."""
    path = Path(path)
    label = name or path.name
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise RunFolderError(f"{label}: cannot be read ({exc.strerror or exc})") from None
    with handle:
        number = 0
        while True:
            number += 1
            try:
                line = handle.readline()
            except UnicodeDecodeError:
                raise RunFolderError(f"{label} line {number}: not UTF-8 text") from None
            if not line:
                return
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                cut = " (the line is cut off: the run may have stopped while writing it)" if not line.endswith("\n") else ""
                raise RunFolderError(f"{label} line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
                                     f"{cut}; repair or delete that line") from None
            if not isinstance(row, dict):
                raise RunFolderError(f"{label} line {number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def _where(name: str, number: int | None) -> str:
    return f"{name} line {number}" if number is not None else name


def _step(row: dict, where: str) -> int:
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RunFolderError(f'{where}: "step" must be a whole number >= 0, got {step!r}')
    return step


def read_metrics(run_dir: str | Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(step, role, values) per line of metrics.jsonl."""
    for number, row in iter_jsonl(Path(run_dir) / "metrics.jsonl"):
        where = _where("metrics.jsonl", number)
        step = _step(row, where)
        role = row.get("role", "")
        if not isinstance(role, str):
            raise RunFolderError(f'{where}: "role" must be text, got {role!r}')
        yield step, role, {k: v for k, v in row.items() if k not in ("step", "role")}


def read_samples(run_dir: str | Path) -> Iterator[dict]:
    """The sample records of samples.jsonl (none when the file is absent)."""
    path = Path(run_dir) / "samples.jsonl"
    if not path.is_file():
        return
    for number, row in iter_jsonl(path):
        where = _where("samples.jsonl", number)
        if row.get("kind") not in SAMPLE_KINDS:
            raise RunFolderError(f'{where}: "kind" must be one of {", ".join(SAMPLE_KINDS)}, got {row.get("kind")!r}')
        if row.get("key") in (None, ""):
            raise RunFolderError(f'{where}: a {row["kind"]} record needs a "key"')
        if "step" in row:
            _step(row, where)
        yield row


def read_checkpoints(run_dir: str | Path) -> dict[int, str]:
    """step -> checkpoint path, from checkpoints.jsonl and the checkpoints/step-* folders present."""
    folder = Path(run_dir)
    found: dict[int, str] = {}
    path = folder / "checkpoints.jsonl"
    if path.is_file():
        for number, row in iter_jsonl(path):
            where = _where("checkpoints.jsonl", number)
            step = _step(row, where)
            if not isinstance(row.get("path"), str) or not row["path"]:
                raise RunFolderError(f'{where}: "path" must be the checkpoint folder, got {row.get("path")!r}')
            found[step] = row["path"]
    for sub in sorted((folder / "checkpoints").glob("step-*")) if (folder / "checkpoints").is_dir() else []:
        digits = sub.name[len("step-"):]
        if sub.is_dir() and digits.isdigit():
            found[int(digits)] = str(sub)
    return dict(sorted(found.items()))


# ---- checkpoint evaluations ---------------------------------------------------------------------

def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_eval(record: Any, where: str = "evals.jsonl") -> dict:
    """One evals.jsonl record, checked and with numbers as floats; RunFolderError says which field is wrong."""
    if not isinstance(record, dict):
        raise RunFolderError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [k for k in EVAL_FIELDS if k not in record]
    if missing:
        raise RunFolderError(f"{where}: missing {', '.join(missing)} (a record has {', '.join(EVAL_FIELDS)})")
    out = dict(record)
    for key, kind in EVAL_FIELDS.items():
        value = record[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise RunFolderError(f'{where}: "{key}" must be a whole number >= 0, got {value!r}')
        if kind is float:
            if not _is_number(value):
                raise RunFolderError(f'{where}: "{key}" must be a finite number, got {value!r}')
            out[key] = float(value)
        if kind is str and not isinstance(value, str):
            raise RunFolderError(f'{where}: "{key}" must be text, got {value!r}')
    if not BENCHMARK_NAME.fullmatch(record["benchmark"]):
        raise RunFolderError(f'{where}: "benchmark" {record["benchmark"]!r} must be 1-100 lowercase letters, digits, '
                             "- and _ (e.g. gsm8k or gsm8k-660-1318)")
    if record["scoring"] not in SCORING:
        raise RunFolderError(f'{where}: "scoring" must be one of {", ".join(SCORING)}, got {record["scoring"]!r}')
    for key in ("score", "ci_low", "ci_high"):
        if not 0.0 <= out[key] <= 1.0:
            raise RunFolderError(f'{where}: "{key}" is a fraction in [0, 1], got {out[key]!r}')
    seconds = record.get("train_seconds")  # optional: the run's summed training seconds at this checkpoint
    if seconds is not None:
        if not _is_number(seconds) or seconds < 0:
            raise RunFolderError(f'{where}: "train_seconds" (training time up to this checkpoint) must be a number '
                                 f'of seconds >= 0 or absent, got {seconds!r}')
        out["train_seconds"] = float(seconds)
    if not out["ci_low"] <= out["score"] <= out["ci_high"]:
        raise RunFolderError(f"{where}: the interval [{out['ci_low']}, {out['ci_high']}] must hold the score "
                             f"{out['score']}")
    return out


def append_eval(run_dir: str | Path, record: dict) -> dict:
    """Append one checked (checkpoint, benchmark) record to ``run_dir/evals.jsonl``; returns it.

    ``record`` holds the fields of the module docstring; extra keys (e.g. ``model``, ``correct``)
    are kept. ``trainer.evaluate.EvalResult.summary()`` plus step and checkpoint is such a record.
    """
    row = check_eval(record, "the record")
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / EVALS, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    return row


def read_evals(run_dir: str | Path) -> list[dict]:
    """The records of evals.jsonl, the last one of each (step, benchmark) kept, by step; [] when absent."""
    path = Path(run_dir) / EVALS
    if not path.is_file():
        return []
    latest: dict[tuple[int, str], dict] = {}
    for number, row in iter_jsonl(path):
        record = check_eval(row, _where(EVALS, number))
        latest[(record["step"], record["benchmark"])] = record
    return [latest[k] for k in sorted(latest)]


def eval_samples_path(run_dir: str | Path, benchmark: str, step: int) -> Path:
    return Path(run_dir) / EVAL_SAMPLES / f"{benchmark}-step{step}.jsonl"


def write_eval_samples(run_dir: str | Path, benchmark: str, step: int, samples: list[dict]) -> Path:
    """Write ``run_dir/eval_samples/<benchmark>-step<step>.jsonl`` (replaced whole, atomically): the samples of
    ``trainer.evaluate.evaluate`` behind the evals.jsonl line of (step, benchmark); returns its path."""
    if not BENCHMARK_NAME.fullmatch(benchmark):
        raise RunFolderError(f"benchmark {benchmark!r} must be 1-100 lowercase letters, digits, - and _")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RunFolderError(f"step must be a whole number >= 0, got {step!r}")
    path = eval_samples_path(run_dir, benchmark, step)
    _replace(path, "".join(json.dumps(s, default=str) + "\n" for s in samples))
    return path


def eval_sample_files(run_dir: str | Path) -> list[tuple[str, int, Path]]:
    """(benchmark, step, path) of every file of eval_samples/ by benchmark and step ([] when absent); a .jsonl
    file named otherwise than ``<benchmark>-step<N>.jsonl`` is a RunFolderError."""
    folder = Path(run_dir) / EVAL_SAMPLES
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        if path.name.startswith("."):  # a writer's .tmp, macOS's ._ files: not samples
            continue
        match = EVAL_SAMPLES_FILE.fullmatch(path.name)
        if match is None:
            raise RunFolderError(f"{EVAL_SAMPLES}/{path.name}: name it <benchmark>-step<N>.jsonl after its "
                                 "evals.jsonl line (e.g. cloze-heldout-step10.jsonl), or move it out of the folder")
        found.append((match["benchmark"], int(match["step"]), path))
    return sorted(found, key=lambda f: (f[0], f[1]))


def _text(row: dict, key: str, where: str, aliases: bool = False) -> str | list[str] | None:
    value = row.get(key)
    if value is None or isinstance(value, str) or (aliases and isinstance(value, list)
                                                   and all(isinstance(v, str) for v in value)):
        return value
    raise RunFolderError(f'{where}: "{key}" must be text{" or a list of texts" if aliases else ""}, got {value!r}')


def check_eval_sample(row: dict, where: str) -> dict:
    """One eval_samples line, checked, with the keys of an ``evaluate`` sample (index, id, question, gold,
    prediction, output, score, correct; the others kept); RunFolderError says which field is wrong."""
    index = row.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 2**31:
        raise RunFolderError(f'{where}: "index" (the item\'s position in the benchmark) must be a whole number from 0 '
                             f"to {2**31 - 1}, got {index!r}")
    score = row.get("score")
    if not _is_number(score) or not 0.0 <= score <= 1.0:
        raise RunFolderError(f'{where}: "score" must be a number in [0, 1], got {score!r}')
    item = row.get("id")
    if isinstance(item, bool) or not isinstance(item, (str, int, type(None))):
        raise RunFolderError(f'{where}: "id" must be text or a whole number, got {item!r}')
    correct = row.get("correct", score >= 1.0)
    if not isinstance(correct, bool):
        raise RunFolderError(f'{where}: "correct" must be true or false, got {correct!r}')
    return {**row, "index": index, "score": float(score), "id": "" if item is None else str(item),
            "question": _text(row, "question", where) or "", "gold": _text(row, "gold", where, aliases=True) or "",
            "prediction": _text(row, "prediction", where), "output": _text(row, "output", where) or "",
            "correct": correct}


def read_eval_samples(path: str | Path) -> list[dict]:
    """The checked samples of one eval_samples file, by index; a repeated index is a RunFolderError."""
    path = Path(path)
    name = f"{EVAL_SAMPLES}/{path.name}"
    seen: dict[int, int] = {}
    out = []
    for number, row in iter_jsonl(path, name):
        where = _where(name, number)
        sample = check_eval_sample(row, where)
        if sample["index"] in seen:
            raise RunFolderError(f'{where}: "index" {sample["index"]} is on line {seen[sample["index"]]} already; '
                                 "each item appears once")
        seen[sample["index"]] = number
        out.append(sample)
    return sorted(out, key=lambda s: s["index"])


def _check_crossplay(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise RunFolderError(f"{where}: expected a JSON object with {', '.join(CROSSPLAY_FIELDS)}")
    missing = [k for k in CROSSPLAY_FIELDS if k not in data]
    if missing:
        raise RunFolderError(f"{where}: missing {', '.join(missing)}")
    rows, cols = data["challengers"], data["reasoners"]
    for key, size in (("challengers", None), ("reasoners", None), ("steps_challenger", rows),
                      ("steps_reasoner", cols)):
        value = data[key]
        if not isinstance(value, list) or not value:
            raise RunFolderError(f'{where}: "{key}" must be a non-empty list')
        if size is not None and len(value) != len(size):
            raise RunFolderError(f'{where}: "{key}" has {len(value)} entries for {len(size)} '
                                 f'{"challengers" if size is rows else "reasoners"}')
    for key in ("challengers", "reasoners"):
        if not all(isinstance(v, str) and v for v in data[key]):
            raise RunFolderError(f'{where}: "{key}" must be non-empty text labels')
    for key in ("steps_challenger", "steps_reasoner"):
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data[key]):
            raise RunFolderError(f'{where}: "{key}" must be whole numbers >= 0 (0 = the base model)')
    for key in ("pass_rate", "n"):
        matrix = data[key]
        if not isinstance(matrix, list) or len(matrix) != len(rows) or \
                not all(isinstance(r, list) and len(r) == len(cols) for r in matrix):
            raise RunFolderError(f'{where}: "{key}" must be {len(rows)} rows (challengers) of {len(cols)} '
                                 "values (reasoners)")
    for i, row in enumerate(data["pass_rate"]):
        for j, v in enumerate(row):
            if v is not None and not (_is_number(v) and 0.0 <= v <= 1.0):
                raise RunFolderError(f'{where}: "pass_rate"[{i}][{j}] must be a fraction in [0, 1] or null, got {v!r}')
    for i, row in enumerate(data["n"]):
        for j, v in enumerate(row):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RunFolderError(f'{where}: "n"[{i}][{j}] must be a whole number >= 0, got {v!r}')
    return {"challengers": list(rows), "reasoners": list(cols), "steps_challenger": list(data["steps_challenger"]),
            "steps_reasoner": list(data["steps_reasoner"]),
            "pass_rate": [[None if v is None else float(v) for v in r] for r in data["pass_rate"]],
            "n": [list(r) for r in data["n"]]}


def write_crossplay(run_dir: str | Path, challengers: list[str], reasoners: list[str], steps_challenger: list[int],
                    steps_reasoner: list[int], pass_rate: list[list[float | None]], n: list[list[int]]) -> Path:
    """Write ``run_dir/crossplay.json`` (checked; replaced whole, atomically); returns its path.

    Row i is challenger i (``challengers[i]``, at step ``steps_challenger[i]``), column j reasoner j.
    """
    data = _check_crossplay({"challengers": challengers, "reasoners": reasoners, "steps_challenger": steps_challenger,
                             "steps_reasoner": steps_reasoner, "pass_rate": pass_rate, "n": n}, "the cross-play")
    _replace(Path(run_dir) / CROSSPLAY, json.dumps(data, indent=1) + "\n")
    return Path(run_dir) / CROSSPLAY


def copy_head(src: str | Path, dest: str | Path, max_bytes: int) -> int:
    """Copy ``src``'s first whole lines, at most ``max_bytes`` of them (UTF-8), to ``dest``: a run folder's
    samples.jsonl cut to a size that ships (GPU run folders brought back, examples/runs/). Returns bytes written."""
    size = 0
    with open(src, "rb") as f, open(dest, "wb") as out:
        for line in f:
            if size + len(line) > max_bytes:
                break
            out.write(line)
            size += len(line)
    return size


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole and atomically (a reader never sees half of it): a dot-file beside it, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_crossplay(run_dir: str | Path) -> dict | None:
    """crossplay.json checked, or None when absent."""
    path = Path(run_dir) / CROSSPLAY
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"{CROSSPLAY}: not valid JSON ({getattr(exc, 'msg', exc)}"
                             f"{f' at line {exc.lineno}' if hasattr(exc, 'lineno') else ''})") from None
    return _check_crossplay(data, CROSSPLAY)
