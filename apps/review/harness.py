"""SCORE's meta-harness driven by a person: the current evaluator harness of a run and edits to it.

The SCORE recipe reports every harness version as an ``event`` record whose ``data`` holds
``harness`` (and ``version``, ``driver``); the DjangoSink stores it as a RunEvent. The current
harness is the newest such event, else the run config's starting harness.

An edit is checked with the trainer's own harness rules (``trainer.methods.harness.
normalize_harness``: the fields dimension_constraints {k, must_include, weight_min, weight_max},
process_constraints {require_gap_analysis, require_verification, citation_cross_check,
min_number_of_tool_call}, notes) against the run's dimension pool and tool budget, stored as a
``HarnessEdit``, and handed to the recipe through ``Control.harness`` (feedback.py).
"""
from __future__ import annotations

import json

from apps.review.models import HarnessEdit
from apps.runs.models import Run, RunEvent
from trainer.method_configs import SECTIONS
from trainer.methods.harness import HarnessError, default_harness, normalize_harness


def has_harness(run: Run) -> bool:
    """Does the run's method have an evaluator harness a person may edit (SCORE)?"""
    section = SECTIONS.get(run.method)
    return bool(section and section.has_harness)


def no_harness(run: Run) -> str:
    """Why a run has no harness to show or edit."""
    which = " and ".join(s.display_name for s in SECTIONS.values() if s.has_harness)
    return f"run {run.pk} is a {run.method} run; only {which} runs have an evaluator harness"


def _section(run: Run):
    """The run's method section with its defaults filled (an unreadable one: the defaults)."""
    data = (run.config or {}).get(run.method) or {}
    try:
        return SECTIONS[run.method].model_validate(data)
    except ValueError:
        return SECTIONS[run.method]()


def pool(run: Run) -> list[str]:
    return [d.lower() for d in _section(run).dimension_pool]


def current(run: Run) -> dict:
    """{"harness", "version", "driver", "step", "source"} of the run's newest harness."""
    event = (RunEvent.objects.filter(run=run, data__has_key="harness").exclude(kind=RunEvent.Kind.VERDICT)
             .order_by("-step", "-created", "-id").first())
    if event is not None and isinstance(event.data.get("harness"), dict):
        return {"harness": event.data["harness"], "version": event.data.get("version"),
                "driver": event.data.get("driver"), "step": event.step, "source": "recipe"}
    return {"harness": default_harness(_section(run)), "version": 0, "driver": "default", "step": None, "source": "config"}


def pending(run: Run) -> HarnessEdit | None:
    return HarnessEdit.objects.filter(run=run, applied_at__isnull=True).order_by("-created", "-id").first()


def validate(run: Run, data) -> dict:
    """A complete harness from JSON text or a dict; raises HarnessError listing every problem."""
    if isinstance(data, str) and not data.strip():
        raise HarnessError(["the harness is empty; paste the JSON object shown on the run page and change it"])
    return normalize_harness(data, pool(run), _section(run).evaluator_searches())


def submit(run: Run, user, data) -> HarnessEdit:
    """Validate and store a person's harness for the recipe's next refresh."""
    if not has_harness(run):
        raise HarnessError([no_harness(run)])
    harness = validate(run, data)
    edit = HarnessEdit.objects.create(run=run, harness=harness, author=user, step=run.current_step,
                                      author_name=getattr(user, "username", "") or "")
    run.notable(f"harness edit saved by {edit.author_name or 'a person'}; handed to the recipe at the next step "
                "boundary", data={"harness_edit": edit.pk}, kind=RunEvent.Kind.VERDICT)
    return edit


def pretty(harness: dict) -> str:
    return json.dumps(harness, indent=2)
