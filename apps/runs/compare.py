"""The compare view's input: which runs (``?ids=1,2`` or ``?ids=1&ids=2``) and which metric.

Bad input becomes a ``CompareError`` whose message says what is wrong and how to fix it; the
page shows it with a 400 instead of a traceback.
"""
from __future__ import annotations

from apps.runs import metrics as run_metrics
from apps.runs.models import Run

MIN_RUNS, MAX_RUNS = 2, 8


class CompareError(ValueError):
    """Unusable ``ids`` / ``metric``; the message is shown to the person."""


def parse_ids(raw: list[str]) -> list[int]:
    """Run ids from repeated and/or comma-separated values, in order, without repeats.

    >>> parse_ids(["3,1", "3", " 2 "])
    [3, 1, 2]
    """
    ids: list[int] = []
    for part in (p.strip() for value in raw for p in value.split(",")):
        if not part:
            continue
        if not part.isdecimal():
            raise CompareError(f"ids must be run numbers separated by commas (e.g. ?ids=1,2), got {part!r}.")
        if int(part) not in ids:
            ids.append(int(part))
    return ids


def runs_to_compare(raw: list[str]) -> list[Run]:
    ids = parse_ids(raw)
    if len(ids) < MIN_RUNS:
        raise CompareError(f"Pick at least {MIN_RUNS} runs to compare (tick them in the runs list), "
                           f"got {len(ids)}.")
    if len(ids) > MAX_RUNS:
        raise CompareError(f"At most {MAX_RUNS} runs can be compared at once, got {len(ids)}; untick some.")
    found = {r.pk: r for r in Run.objects.select_related("owner").filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise CompareError(f"No run {', '.join(map(str, missing))}; check the ids in the address.")
    return [found[i] for i in ids]


def metric_choices(runs: list[Run]) -> list[str]:
    """Every metric name any of the runs reports, reward names first."""
    names = sorted({n for r in runs for n in run_metrics.metric_names(r.pk)})
    first = [n for n in run_metrics.REWARD_NAMES if n in names]
    return first + [n for n in names if n not in first]


def pick_metric(requested: str | None, choices: list[str]) -> str:
    if requested:
        if requested not in choices:
            raise CompareError(f"None of these runs reports a metric named {requested!r}; "
                               f"choose one of: {', '.join(choices[:30]) or 'none yet'}.")
        return requested
    return choices[0] if choices else run_metrics.REWARD_NAMES[0]
