"""benchmarks/RESULTS.md opens with its headline table: within the first 40 lines, with the columns
what was measured | hardware | config | command | number | date, and at least 5 dated rows."""
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "RESULTS.md"
COLUMNS = ["what was measured", "hardware", "config", "command", "number", "date"]


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (a `\\|` inside a cell is not a separator)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _first_table(lines: list[str]) -> tuple[int, list[str]]:
    """(index of the header line, the table's lines) of the first Markdown table in the file."""
    for i, line in enumerate(lines):
        if line.startswith("|"):
            table = []
            for row in lines[i:]:
                if not row.startswith("|"):
                    break
                table.append(row)
            return i, table
    raise AssertionError("RESULTS.md has no table")


def test_results_opens_with_the_headline_table():
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    start, table = _first_table(lines)
    assert start < 40, f"the first table starts on line {start + 1}, not within the first 40"
    assert _cells(table[0]) == COLUMNS
    assert all(set(c) <= set("-: ") and c for c in _cells(table[1])), "the second line is the header separator"
    rows = [_cells(row) for row in table[2:]]
    assert all(len(row) == len(COLUMNS) for row in rows), [row for row in rows if len(row) != len(COLUMNS)]
    dated = [row for row in rows if re.fullmatch(r"\d{4}-\d{2}-\d{2}", row[-1])]
    assert len(dated) >= 5, f"{len(dated)} rows with a YYYY-MM-DD date"
    assert len(dated) == len(rows), [row[0] for row in rows if row not in dated]
