"""What a run sends to human review, decided as its samples are written.

The policy comes from the run's config ``review`` section (``trainer.config.ReviewConfig``):
``tasks`` / ``rubrics`` / ``grades`` are the shares of new samples sampled into the queue
(default 5% each), and ``suspicious`` names the detectors whose hits always go in
(``suspicious.py``: near-duplicate tasks, judge disagreement, pass rate 0 or 1, watchdog flags).

Sampling is deterministic: an item is picked when ``sha256(f"{seed}:{kind}:{key}")`` read as a
number in [0, 1) is below the share. The same run config therefore picks the same items on a
re-run or a resume, and raising a share only adds items. While the run has fewer than
``short_queue`` items pending, each step also gets at least ``min_per_step`` items of each kind
whose share is above 0 (the lowest hashes of the step's samples not picked already): at 5% a step
of a dozen tasks would usually send none, and a reviewer would wait for nothing.

``enqueue_for_review(run, records)`` is called by the DjangoSink after it stored a flush of
sample records (a run hook, apps/runs/hooks.py, registered in apps/review/apps.py). It creates
one ``ReviewItem`` per picked or suspicious task / rubric / grade with a snapshot of the content
(the row itself may be deleted later; the verdict stays).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

from django.db.models import Count
from pydantic import ValidationError

from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.review import suspicious
from apps.review.models import Kind, ReviewItem
from apps.runs.live import publish
from apps.runs.models import Run
from trainer.config import ReviewConfig

log = logging.getLogger("selfplay.review")

SHARE_FIELD = {Kind.TASK: "tasks", Kind.RUBRIC: "rubrics", Kind.GRADE: "grades"}
TEXT_MAX = 20_000
DATA_MAX = 20_000


@dataclass(frozen=True)
class Policy:
    shares: dict[str, float]
    detectors: frozenset[str]
    duplicate_similarity: float
    recent_tasks: int
    seed: int = 0
    min_per_step: int = 0
    short_queue: int = 0

    @classmethod
    def of(cls, config: dict | None) -> Policy:
        """The policy of a run config; a missing or broken ``review`` section means the defaults."""
        config = config if isinstance(config, dict) else {}
        try:
            section = ReviewConfig.model_validate(config.get("review") or {})
        except ValidationError as exc:
            log.warning("run config has an invalid review section (%s); using the defaults", exc.errors()[:1])
            section = ReviewConfig()
        seed = config.get("seed", 0)
        return cls(shares={k: getattr(section, f) for k, f in SHARE_FIELD.items()},
                   detectors=frozenset(section.suspicious), duplicate_similarity=section.duplicate_similarity,
                   recent_tasks=section.recent_tasks, seed=seed if isinstance(seed, int) else 0,
                   min_per_step=section.min_per_step, short_queue=section.short_queue)


def hash_unit(seed: int, kind: str, key: str) -> float:
    """A number in [0, 1) fixed by (seed, kind, key): the first 8 bytes of a sha256."""
    digest = hashlib.sha256(f"{seed}:{kind}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def picked(policy: Policy, kind: str, key: str) -> bool:
    return hash_unit(policy.seed, kind, key) < policy.shares.get(kind, 0.0)


def enqueue_for_review(run, records: list[dict]) -> int:
    """Queue the picked and suspicious tasks / rubrics / grades of ``records`` (already written to
    the episode tables); returns how many new items entered the queue."""
    run_id = run.pk if isinstance(run, Run) else int(run)
    config = run.config if isinstance(run, Run) else Run.objects.filter(pk=run_id).values_list("config", flat=True).first()
    policy = Policy.of(config)
    by_kind = _split(records)
    reasons = suspicious.find(run_id, by_kind, policy)
    chosen = {kind: [r for r in by_kind[kind] if picked(policy, kind, str(r["key"])) or (kind, str(r["key"])) in reasons]
              for kind in by_kind}
    topped = _top_up(run_id, policy, by_kind, chosen)
    items = _items(run_id, chosen, policy, reasons, topped)
    if not items:
        return 0
    before = ReviewItem.objects.filter(run_number=run_id).count()
    ReviewItem.objects.bulk_create(items, ignore_conflicts=True, batch_size=500)
    added = ReviewItem.objects.filter(run_number=run_id).count() - before
    if added:
        publish(run_id, {"type": "review", "event": "queued", "count": added})
    return added


def _top_up(run_id: int, policy: Policy, by_kind: dict[str, list[dict]], chosen: dict[str, list[dict]]) -> set:
    """While the run's queue is short, add to ``chosen`` until each step of the records holds
    ``min_per_step`` items of each sampled kind (counting those queued by earlier flushes); returns
    the (kind, key) pairs it added."""
    added: set = set()
    if policy.min_per_step <= 0 or not any(by_kind.values()):
        return added
    if ReviewItem.objects.filter(run_number=run_id, status="pending").count() >= policy.short_queue:
        return added
    for kind, records in by_kind.items():
        if policy.shares.get(kind, 0.0) <= 0 or not records:
            continue
        keys = {str(r["key"]) for r in chosen[kind]}
        steps: dict[int, list[dict]] = {}
        for r in records:
            steps.setdefault(_int(r.get("step")), []).append(r)
        queued = dict(ReviewItem.objects.filter(run_number=run_id, kind=kind, step__in=list(steps))
                      .values("step").annotate(n=Count("id")).values_list("step", "n"))
        for step, rows in steps.items():
            have = queued.get(step, 0) + sum(str(r["key"]) in keys for r in rows)
            spare = sorted((r for r in rows if str(r["key"]) not in keys),
                           key=lambda r: hash_unit(policy.seed, kind, str(r["key"])))
            for r in spare[:max(policy.min_per_step - have, 0)]:
                chosen[kind].append(r)
                keys.add(str(r["key"]))
                added.add((kind, str(r["key"])))
    return added


def flag_suspicious(run, kind: str, key: str, reason: str) -> ReviewItem | None:
    """For a watchdog on the web side: put one written sample in the queue with ``reason``
    (or add the reason to its item). None when no such sample exists."""
    run_id = getattr(run, "pk", run)
    model = {Kind.TASK: Task, Kind.RUBRIC: Rubric, Kind.GRADE: Grade}[kind]
    row = model.objects.filter(run_id=run_id, key=key).first()
    if row is None:
        return None
    item = ReviewItem.objects.filter(run_number=run_id, kind=kind, key=key).first()
    if item is None:
        record = {"key": key, **{f.name: getattr(row, f.name) for f in model._meta.concrete_fields
                                 if f.name not in ("id", "run", "task", "attempt", "rubric", "key")}}
        item = _items(run_id, {kind: [record]}, Policy.of({}), {(kind, key): [reason]})[0]
        item.save()
    elif reason not in item.suspicious:
        item.suspicious = [*item.suspicious, reason]
        item.save(update_fields=["suspicious"])
    return item


# ---- records -> items -------------------------------------------------------------------------

def _split(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, dict[str, dict]] = {k: {} for k in SHARE_FIELD}
    for r in records:
        if isinstance(r, dict) and r.get("kind") in out and r.get("key") not in (None, ""):
            out[r["kind"]][str(r["key"])[:200]] = r
    return {k: list(v.values()) for k, v in out.items()}


def _items(run_id: int, chosen: dict[str, list[dict]], policy: Policy, reasons: dict,
           topped: set = frozenset()) -> list[ReviewItem]:
    ctx = _Context(run_id, chosen)
    items = []
    for kind, records in chosen.items():
        for r in records:
            key = str(r["key"])[:200]
            fields = getattr(ctx, kind)(r)
            items.append(ReviewItem(run_id=run_id, run_number=run_id, kind=kind, key=key, step=_int(r.get("step")),
                                    sampled=picked(policy, kind, key) or (kind, key) in topped, suspicious=reasons.get((kind, key), []),
                                    **fields))
    return items


class _Context:
    """The rows an item links to and the text its snapshot needs, fetched in a few queries."""

    def __init__(self, run_id: int, chosen: dict[str, list[dict]]):
        grades = chosen.get(Kind.GRADE, [])
        self.grades = _by_key(Grade, run_id, [g["key"] for g in grades])
        self.attempts = _by_key(Attempt, run_id, [g.get("attempt_key") for g in grades])
        rubric_keys = [r["key"] for r in chosen.get(Kind.RUBRIC, [])] + [g.get("rubric_key") for g in grades]
        self.rubrics = _by_key(Rubric, run_id, rubric_keys)
        task_keys = ([t["key"] for t in chosen.get(Kind.TASK, [])] + [r.get("task_key") for r in chosen.get(Kind.RUBRIC, [])]
                     + [a.task_key for a in self.attempts.values()])
        self.tasks = _by_key(Task, run_id, task_keys)

    def _task_part(self, task_key: str) -> dict:
        t = self.tasks.get(task_key)
        return {"task_key": task_key, "question": _clip(t.question) if t else "", "answer": _clip(t.answer) if t else ""}

    def task(self, r: dict) -> dict:
        snap = {"question": _clip(r.get("question")), "answer": _clip(r.get("answer")), "valid": bool(r.get("valid", True)),
                "pass_rate": _float(r.get("pass_rate")), "role": _clip(r.get("role")), "format": _clip(r.get("format")),
                "document_id": _clip(r.get("document_id")), "data": _small(r.get("data"))}
        return {"task": self.tasks.get(str(r["key"])), "task_key": str(r["key"])[:200], "snapshot": snap}

    def rubric(self, r: dict) -> dict:
        task_key = _clip(r.get("task_key"))[:200]
        snap = {"text": _clip(r.get("text")), "priority": _clip(r.get("priority")), **self._task_part(task_key)}
        return {"rubric": self.rubrics.get(str(r["key"])), "task": self.tasks.get(task_key), "task_key": task_key,
                "priority": _clip(r.get("priority"))[:16], "snapshot": snap}

    def grade(self, r: dict) -> dict:
        attempt = self.attempts.get(str(r.get("attempt_key") or ""))
        rubric = self.rubrics.get(str(r.get("rubric_key") or ""))
        task_key = attempt.task_key if attempt else ""
        snap = {"score": _float(r.get("score")), "judge_text": _clip(r.get("judge_text")),
                "attempt_key": _clip(r.get("attempt_key")), "attempt_text": _clip(attempt.text) if attempt else "",
                "attempt_reward": attempt.reward if attempt else None,
                "rubric_key": _clip(r.get("rubric_key")), "rubric_text": _clip(rubric.text) if rubric else "",
                "priority": rubric.priority if rubric else "", "data": _small(r.get("data")), **self._task_part(task_key)}
        return {"grade": self.grades.get(str(r["key"])), "rubric": rubric, "task": self.tasks.get(task_key),
                "task_key": task_key[:200], "priority": (rubric.priority if rubric else "")[:16],
                "judge_score": _float(r.get("score")), "snapshot": snap}


def _by_key(model, run_id: int, keys) -> dict:
    keys = {str(k)[:200] for k in keys if k not in (None, "")}
    return {row.key: row for row in model.objects.filter(run_id=run_id, key__in=keys)} if keys else {}


def _clip(value, limit: int = TEXT_MAX) -> str:
    text = "" if value is None else str(value).replace("\x00", "")
    return text if len(text) <= limit else text[:limit] + " …[cut]"


def _small(data) -> dict:
    """Method-specific data, kept when it is small JSON (a QCP or harness may be big)."""
    try:
        text = json.dumps(data or {}, default=str)
    except (TypeError, ValueError):
        return {}
    if len(text) > DATA_MAX:
        return {"omitted": f"{len(text)} chars"}
    return _no_nul(json.loads(text)) if isinstance(data, dict) else {"value": _no_nul(json.loads(text))}


def _no_nul(value):
    """Postgres JSON refuses NUL characters and NaN."""
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    if isinstance(value, float) and (value != value or abs(value) == float("inf")):
        return None
    return value.replace("\x00", "") if isinstance(value, str) else value


def _float(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
