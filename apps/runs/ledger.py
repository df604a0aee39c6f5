"""The task ledger of a run: how hard its generated tasks are, how many are invalid, how many repeat.

Read from ``apps.episodes.models.Task`` (one row per task a role wrote, with the solver's
``pass_rate`` and a ``valid`` flag):

- difficulty histogram: graded tasks (valid, with a pass rate) in ``BINS`` equal bins of
  pass rate, for the whole run and for the latest ``RECENT_STEPS`` steps that have tasks;
  the self-play target (a task the solver gets right half of the time) is ``TARGET``;
- invalid share: invalid tasks / all tasks, overall and per step;
- near-duplicate rate among recent tasks: the newest ``RECENT_TASKS`` questions (their first
  ``QUESTION_CHARS`` characters) in (step, id) order, each compared with the ``DUP_WINDOW``
  questions before it by the Jaccard similarity of their character ``SHINGLE``-gram sets; a
  question at or above ``DUP_THRESHOLD`` with any of them counts as a near duplicate (the
  detector review uses too: apps/episodes/near_duplicates.py).

Per-step numbers are computed by Postgres (GROUP BY on the (run, step) index); only the
recent questions are read into Python.
"""
from __future__ import annotations

from django.db.models import Avg, Count, FloatField, IntegerField, Q
from django.db.models.functions import Cast, Floor, Least, Substr

from apps.episodes.models import Task
from apps.episodes.near_duplicates import SHINGLE, near_duplicate_flags

TARGET = 0.5
BAND = 0.25  # "near the target": pass rate within TARGET +- BAND
BINS = 10
RECENT_STEPS = 10
RECENT_TASKS = 400
DUP_WINDOW = 100
DUP_THRESHOLD = 0.7
QUESTION_CHARS = 500  # a question's first characters are what is compared (bounds the cost)
DUP_METHOD = (f"character {SHINGLE}-gram Jaccard similarity (first {QUESTION_CHARS} characters) "
              f"\u2265 {DUP_THRESHOLD} with one of the "
              f"{DUP_WINDOW} questions before it (lexical overlap by MinHash, exact near the threshold; "
              "not embeddings)")


# ---- pure parts ------------------------------------------------------------------------------

def bin_edges(bins: int = BINS) -> list[tuple[float, float]]:
    return [(round(i / bins, 6), round((i + 1) / bins, 6)) for i in range(bins)]


def bin_of(pass_rate: float, bins: int = BINS) -> int:
    """The histogram bin of a pass rate; 1.0 falls in the last bin, out-of-range rates are clamped.

    >>> [bin_of(r, 10) for r in (0.0, 0.05, 0.5, 0.99, 1.0)]
    [0, 0, 5, 9, 9]
    """
    return max(0, min(bins - 1, int(pass_rate * bins)))


# ---- from the database ----------------------------------------------------------------------

def _histogram(qs) -> list[int]:
    """Counts of graded tasks per pass-rate bin, computed by Postgres."""
    counts = [0] * BINS
    bucket = Least(Cast(Floor(Cast("pass_rate", FloatField()) * BINS), IntegerField()), BINS - 1)
    for b, n in qs.annotate(b=bucket).values("b").annotate(n=Count("id")).values_list("b", "n"):
        counts[max(0, min(BINS - 1, int(b)))] += n
    return counts


def _per_step(run_id: int) -> list[dict]:
    rows = (Task.objects.filter(run_id=run_id).values("step").order_by("step")
            .annotate(tasks=Count("id"), invalid=Count("id", filter=Q(valid=False)),
                      graded=Count("id", filter=Q(valid=True, pass_rate__isnull=False)),
                      pass_rate=Avg("pass_rate", filter=Q(valid=True))))
    return list(rows)


def duplicates(run_id: int) -> dict:
    """Near-duplicate flags of the newest ``RECENT_TASKS`` questions, overall and per step."""
    recent = list(Task.objects.filter(run_id=run_id).exclude(question="").order_by("-step", "-id")
                  .annotate(head=Substr("question", 1, QUESTION_CHARS)).values_list("step", "head")[:RECENT_TASKS])[::-1]
    flags = near_duplicate_flags([q for _, q in recent], DUP_THRESHOLD, DUP_WINDOW)
    by_step: dict[int, list[int]] = {}
    for (step, _), flag in zip(recent, flags):
        counted = by_step.setdefault(step, [0, 0])
        counted[0] += 1
        counted[1] += flag
    steps = sorted(by_step)
    return {"method": DUP_METHOD, "checked": len(recent), "duplicates": sum(flags),
            "rate": sum(flags) / len(flags) if flags else None,
            "steps": steps, "rate_by_step": [by_step[s][1] / by_step[s][0] for s in steps]}


def ledger(run) -> dict:
    """Everything the run page's task ledger draws (JSON-safe)."""
    run_id = getattr(run, "pk", run)
    per_step = _per_step(run_id)
    tasks = sum(r["tasks"] for r in per_step)
    invalid = sum(r["invalid"] for r in per_step)
    graded_qs = Task.objects.filter(run_id=run_id, valid=True, pass_rate__isnull=False)
    recent_steps = [r["step"] for r in per_step if r["graded"]][-RECENT_STEPS:]
    hist_all = _histogram(graded_qs)
    hist_recent = _histogram(graded_qs.filter(step__gte=recent_steps[0])) if recent_steps else [0] * BINS
    graded = sum(hist_all)
    near = graded_qs.filter(pass_rate__gte=TARGET - BAND, pass_rate__lte=TARGET + BAND).count()
    return {
        "target": TARGET,
        "bins": [{"lo": lo, "hi": hi, "all": a, "recent": r}
                 for (lo, hi), a, r in zip(bin_edges(), hist_all, hist_recent)],
        "recent_steps": [recent_steps[0], recent_steps[-1]] if recent_steps else None,
        "tasks": tasks, "invalid": invalid, "invalid_share": invalid / tasks if tasks else None,
        "graded": graded, "near_target": near, "near_target_share": near / graded if graded else None,
        "roles": sorted(set(Task.objects.filter(run_id=run_id).values_list("role", flat=True).distinct())),
        "steps": [r["step"] for r in per_step],
        "invalid_share_by_step": [r["invalid"] / r["tasks"] for r in per_step],
        "pass_rate_by_step": [r["pass_rate"] for r in per_step],
        "duplicates": duplicates(run_id),
        "coverage": coverage(run, [r["step"] for r in per_step]),
    }


def coverage(run, steps: list[int]) -> str:
    """For an imported run whose folder kept samples of only some steps (samples.jsonl cut to a size on the
    GPU machine): which steps the ledger and the samples are computed from; "" when they cover the run."""
    if not getattr(run, "imported", False) or not steps or not run.current_step:
        return ""
    first, last = min(steps), max(steps)
    if last >= run.current_step and first <= 1:
        return ""
    kept = f"step {first}" if first == last else f"steps {first}–{last}"
    return (f"Computed from the samples this imported folder kept: {kept} of the "
            f"{run.current_step} the run reached (its samples.jsonl was trimmed to fit the folder); the curves and "
            "evaluations cover every step.")
