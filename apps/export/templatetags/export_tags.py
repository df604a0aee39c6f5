"""``{% export_panel run %}``: the run page's download buttons for the streaming export (apps/export/stream.py)."""
from django import template
from django.urls import reverse

from apps.export.stream import Filters, empty_reason, queryset

register = template.Library()

# What the run page offers to download (every kind stays reachable through the API).
DOWNLOADS = (
    ("tasks", "Tasks: the questions a role wrote (or the prompts), with validity and pass rate"),
    ("attempts", "Attempts: every answer, with its turns, passages, reward and token mask"),
    ("pairs", "Preference pairs: two answers to one task, the higher reward chosen"),
    ("verdicts", "Review verdicts: what reviewers approved or flagged, and why"),
)
FORMATS = (("jsonl", "JSONL"), ("parquet", "Parquet"))


@register.inclusion_tag("export/_downloads.html")
def export_panel(run):
    rows = []
    for kind, label in DOWNLOADS:
        count = None if kind == "pairs" else queryset(kind, run, Filters()).count()  # pairs: made while downloading
        rows.append({"kind": kind, "label": label, "rows": count, "empty": empty_reason(kind, run) if count == 0 else "",
                     "formats": [{"name": fmt, "label": name,
                                  "url": reverse("api-run-export", kwargs={"run_id": run.pk, "kind": kind, "fmt": fmt})}
                                 for fmt, name in FORMATS]})
    return {"run": run, "downloads": rows}
