"""What the home page shows. Each app contributes a small summary; missing pieces stay empty."""
from django.apps import apps


def _count(label: str, model: str, **filters) -> int:
    try:
        return apps.get_model(label, model).objects.filter(**filters).count()
    except LookupError:
        return 0


def dashboard_context(request) -> dict:
    return {
        "n_runs": _count("runs", "Run"),
        "n_active_runs": _count("runs", "Run", status__in=["queued", "running", "paused"]),
        "n_corpora": _count("corpora", "Corpus"),
        "n_review": _count("review", "ReviewItem", status="pending"),
    }
