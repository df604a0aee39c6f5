"""The cross-play heatmap's one-line reading (templates/evals/_crossplay_body.html).

Rows are Challenger checkpoints (whose tasks), columns Solver (Reasoner) checkpoints (who answers), both earliest
first. Three lines through the matrix tell its story:

- the diagonal, each checkpoint on its own tasks: what the run itself saw, step by step;
- the first row, later Solvers on the first Challenger's tasks: did the Solver get better on fixed tasks;
- the first column, the first Solver on later Challengers' tasks: did the tasks get harder.

The latest/latest cell read against the first-Solver/latest-Challenger cell says whether a high pass rate there
means a Solver that kept up with harder tasks or tasks that stayed easy.
"""
from __future__ import annotations

FLAT = 0.02  # a change smaller than this (pass rate, 0-1) reads as "flat"


def _move(a, b) -> str:
    if b - a > FLAT:
        return "up"
    if a - b > FLAT:
        return "down"
    return "flat"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def reading(matrix: list[list], row_labels: list[str], column_labels: list[str]) -> str:
    """One line on what the matrix shows, "" while it has fewer than two rows or columns to read.

    >>> reading([[0.2, 0.5], [0.1, 0.6]], ["step 1", "step 9"], ["step 1", "step 9"])  # doctest: +NORMALIZE_WHITESPACE
    'Diagonal (each checkpoint on its own tasks) 20% -> 60%, up; later Solvers on the first tasks 20% -> 50%, up (the
    Solver got better on fixed tasks); the first Solver on later tasks 20% -> 10%, down (the tasks got harder).
    The high step 9/step 9 cell (60%) with a low first-Solver cell on those tasks (10%): the Solver kept pace with
    harder tasks.'
    >>> reading([[0.07, 0.05], [0.40, 0.82]], ["a", "b"], ["a", "b"]).split(". The ")[-1]  # doctest: +NORMALIZE_WHITESPACE
    "high b/b cell (82%) against the first Solver's 40% on those tasks, which are no harder for it than the first
    ones (7%): the latest Solver learned the latest Challenger's tasks, not harder ones."
    >>> reading([[0.5]], ["a"], ["a"])
    ''
    """
    if len(matrix) < 2 or any(len(row) < 2 for row in matrix):
        return ""
    n_rows, n_cols = len(matrix), len(matrix[0])
    cell = lambda i, j: matrix[i][j] if i < n_rows and j < len(matrix[i]) else None  # noqa: E731
    parts = []
    square = row_labels == column_labels
    if square:
        diag = [cell(i, i) for i in range(min(n_rows, n_cols)) if cell(i, i) is not None]
        if len(diag) >= 2:
            parts.append(f"Diagonal (each checkpoint on its own tasks) {_pct(diag[0])} -> {_pct(diag[-1])}, "
                         f"{_move(diag[0], diag[-1])}")
    first_row = [v for v in matrix[0] if v is not None]
    if len(first_row) >= 2:
        move = _move(first_row[0], first_row[-1])
        meaning = {"up": "the Solver got better on fixed tasks", "down": "the Solver got worse on fixed tasks",
                   "flat": "the Solver did not change on fixed tasks"}[move]
        parts.append(f"later Solvers on the first tasks {_pct(first_row[0])} -> {_pct(first_row[-1])}, {move} ({meaning})")
    first_col = [row[0] for row in matrix if row and row[0] is not None]
    if len(first_col) >= 2:
        move = _move(first_col[0], first_col[-1])
        meaning = {"up": "the tasks got easier", "down": "the tasks got harder", "flat": "the tasks' difficulty held"}[move]
        parts.append(f"the first Solver on later tasks {_pct(first_col[0])} -> {_pct(first_col[-1])}, {move} ({meaning})")
    if not parts:
        return ""
    text = "; ".join(parts)
    text = text[0].upper() + text[1:] + "."
    last, early = cell(n_rows - 1, n_cols - 1), cell(n_rows - 1, 0)
    if last is not None and early is not None:
        where = f"{row_labels[-1]}/{column_labels[-1]}"
        harder = first_col and early < first_col[0] - FLAT  # the first Solver finds the latest tasks harder
        if last >= 0.5 and early < last - FLAT and harder:
            text += (f" The high {where} cell ({_pct(last)}) with a low first-Solver cell on those tasks "
                     f"({_pct(early)}): the Solver kept pace with harder tasks.")
        elif last >= 0.5 and early < last - FLAT:
            text += (f" The high {where} cell ({_pct(last)}) against the first Solver's {_pct(early)} on those tasks, "
                     f"which are no harder for it than the first ones ({_pct(first_col[0])}): the latest Solver "
                     "learned the latest Challenger's tasks, not harder ones.")
        elif last >= 0.5:
            text += (f" The high {where} cell ({_pct(last)}) with the first Solver as high on those tasks "
                     f"({_pct(early)}): the latest tasks are easy, not a sign the Solver learned.")
        else:
            text += f" The {where} cell ({_pct(last)}): the latest Solver does not master the latest tasks."
    return text
