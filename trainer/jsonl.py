"""Reading JSON Lines with errors that name the file and line: one reader for prompt sets
(trainer/data.py), corpora (trainer/tools/corpus.py) and benchmarks (trainer/evaluate.py).

``json_objects(lines, where, error, hint)`` yields ``(line_number, object)`` for every non-blank line
of ``lines`` (str or bytes), and raises ``error`` with ``"<where>:<n>: ..."`` on a line that is not
UTF-8, not JSON, or not a JSON object; ``hint`` ends the message (what a line should look like).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator


def json_objects(lines: Iterable[str | bytes], where: str, error: type[Exception],
                 hint: str = "each line must be one JSON object") -> Iterator[tuple[int, dict]]:
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                raise error(f"{where}:{n}: not UTF-8 text; save the file as UTF-8 JSONL") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}:{n}: not valid JSON ({exc.msg}); {hint}") from None
        if not isinstance(row, dict):
            raise error(f"{where}:{n}: each line must be a JSON object; {hint}")
        yield n, row
