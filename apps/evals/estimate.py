"""What an evaluation will cost, shown before it is launched (as the run launch form does): items
times the most tokens an answer may take, and a time measured on the same queue, never assumed.

The time per item is that of the newest finished evaluations on the queue (their answered items and
seconds, all benchmarks), scaled by the ratio of the two ``max_new_tokens``. Without one it says so.
"""
from __future__ import annotations

from apps.evals.models import EvalJob, EvalResult
from apps.runs import metrics as run_metrics

CPU_DEFAULT_LIMIT = 10  # an evaluation on the CPU answers a few items unless asked for more
GPU_DEFAULT_LIMIT = 100


def default_limit(queue: str) -> int:
    return GPU_DEFAULT_LIMIT if queue == "gpu" else CPU_DEFAULT_LIMIT


def seconds_per_item(queue: str, model: str = "") -> dict | None:
    """{"job", "seconds", "max_new_tokens"}: the newest finished evaluation on ``queue`` that answered
    items (of ``model`` when there is one), or None."""
    jobs = EvalJob.objects.filter(queue=queue, status="finished", done__gt=0).order_by("-finished_at", "-id")
    candidates = (list(jobs.filter(model_spec=model)[:5]) if model else []) + list(jobs[:5])
    for job in candidates:
        rows = list(EvalResult.objects.filter(job=job, complete=True, n__gt=0).values_list("n", "seconds"))
        n, seconds = sum(r[0] for r in rows), sum(r[1] or 0 for r in rows)
        if n and seconds:
            return {"job": job.pk, "seconds": seconds / n, "max_new_tokens": job.max_new_tokens}
    return None


def estimate(queue: str, items: int, max_new_tokens: int = 512, model: str = "") -> dict:
    """{"items", "tokens", "seconds" | None, "text"} for ``items`` answers on ``queue``."""
    items, max_new_tokens = max(int(items), 0), max(int(max_new_tokens), 1)
    out = {"items": items, "tokens": items * max_new_tokens, "seconds": None}
    head = f"{items:,} item{'s' if items != 1 else ''}, at most {items * max_new_tokens:,} generated tokens"
    timed = seconds_per_item(queue, model)
    if timed is None:
        out["text"] = (f"{head}; no finished evaluation on {queue} yet to time an item by (the job page counts "
                       "the items as they are answered)")
        return out
    per = timed["seconds"] * max_new_tokens / max(timed["max_new_tokens"], 1)
    out["seconds"] = per * items
    out["text"] = (f"{head}; {run_metrics.duration(per * items)} on {queue} "
                   f"({run_metrics.duration(per)} an item, scaled from evaluation {timed['job']}: "
                   f"{run_metrics.duration(timed['seconds'])} an item at {timed['max_new_tokens']} tokens)")
    return out
