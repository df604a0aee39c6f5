"""The run's held-out scores for the health watchdog (an ``on_heldout`` run hook, apps/runs/hooks.py): its
reward_heldout_divergence rule reads them when the run reports no held-out metric of its own."""
from __future__ import annotations

from collections import defaultdict

from apps.evals.models import EvalResult


def heldout_from_evals(run) -> dict[int, float]:
    """Step -> score of the run's complete checkpoint evaluations (EvalResult rows) of one benchmark: the
    one evaluated at the most steps (ties: first by name), so the series does not mix benchmarks."""
    by_bench: dict[str, dict[int, float]] = defaultdict(dict)
    for name, step, score in (EvalResult.objects.filter(job__run=run, complete=True, score__isnull=False,
                                                        job__step__isnull=False)
                              .order_by("job__step", "pk").values_list("benchmark__name", "job__step", "score")):
        by_bench[name][step] = score
    if not by_bench:
        return {}
    return by_bench[min(by_bench, key=lambda b: (-len(by_bench[b]), b))]
