"""What the home page shows. Each app contributes a small summary; missing pieces stay empty."""
from typing import Callable

from django.apps import apps

SUMMARIES: dict[str, Callable[[], list]] = {}  # name -> fn() filling that block; apps above accounts register


def contribute(name: str, fn: Callable[[], list]) -> Callable[[], list]:
    """An app above accounts fills a block of the home page (from its ``AppConfig.ready()``), so this
    module imports none of them: ``learned`` (apps.evals, the runs that learned)."""
    SUMMARIES[name] = fn
    return fn


def _count(label: str, model: str, **filters) -> int:
    try:
        return apps.get_model(label, model).objects.filter(**filters).count()
    except LookupError:
        return 0


ACTIVE_SHOWN = 5  # active runs linked from the home page (the demo run among them)


def _active_runs() -> list:
    try:
        model = apps.get_model("runs", "Run")
    except LookupError:
        return []
    return list(model.objects.filter(status__in=["queued", "running", "paused"]).order_by("-created_at", "-id")
                .only("id", "method", "model_name", "corpus_name", "status", "current_step", "total_steps")[:ACTIVE_SHOWN])


def dashboard_context(request) -> dict:
    return {
        "active_runs": _active_runs(),
        "n_runs": _count("runs", "Run"),
        "n_active_runs": _count("runs", "Run", status__in=["queued", "running", "paused"]),
        "n_corpora": _count("corpora", "Corpus"),
        "n_review": _count("review", "ReviewItem", status="pending"),
        "learned": _learned(),
    }


def _learned() -> list[dict]:
    """Each method's best paired gain over its base model (apps/evals/learned.py, registered by apps.evals
    through ``contribute``), or [] without evals."""
    fn = SUMMARIES.get("learned")
    return fn() if fn else []
