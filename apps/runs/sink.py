"""DjangoSink: the trainer's Sink (trainer/sink.py) writing to Postgres and the live page.

Reports are buffered and written in one transaction per flush: at every step boundary (the
recipe calls ``control()`` there), when the buffer grows large, on a checkpoint, and on
``close()``. Writes are upserts on the natural keys (metric (run, step, role, name), sample
(run, key)), so a resumed run that re-reports a step replaces rows instead of duplicating
them. After each flush a few small messages go to the Channels group ``run-<id>``
(``type`` metric / sample), one per checkpoint (``checkpoint``) and one per phase of a step
(``progress``: rollout, update; see trainer/sink.py); a Redis outage is counted in ``publish_failures`` and never
stops the run.

A write whose database connection was lost (Postgres restarted, the session terminated) is
retried on a fresh connection (``with_db_retry``): each flush is one transaction of upserts, so a
retried write neither halves nor doubles a step; when every retry fails the reports stay buffered
and the exception ends the run (failed, with the database error as its message).

``control()`` answers from the run's row: ``requested == "pause"`` -> pause,
``"cancel"`` (or a run that is no longer ``running``, e.g. marked failed by the reaper) ->
stop, plus what the control hooks answer (apps/runs/hooks.py: apps.review fills in the human
review verdicts and harness edits; a failing hook is logged and counted in ``review_failures``;
training goes on). After a flush and after a checkpoint the flush and checkpoint hooks run
(review sampling, automatic evaluations); a failing one is logged and never stops the run.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from apps.accounts.roles import server_path
from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.runs import hooks
from apps.runs.live import publish, remember_progress
from apps.runs.models import Checkpoint, Metric, Run, RunEvent, Status
from apps.runs.samples import why_invalid
from apps.runs.watchdog import check_run
from trainer.sink import SAMPLE_KINDS, Control

log = logging.getLogger("selfplay.runs")

PACE_POLL_SECONDS = 2.0  # a control ahead of its time-limited run looks at the run again this often
PACE_MAX_WAIT_SECONDS = 240.0  # ... for at most this long at one step boundary (a multi-GPU control's other ranks
                               # wait in a collective meanwhile: well under the process group's 10-minute timeout)
SAMPLE_MESSAGES_PER_FLUSH = 24  # live page gets a taste, the database gets everything
TEXT_PREVIEW = 1500
DB_RETRY_DELAYS = (0.5, 2.0, 5.0)  # seconds before each new try of a write whose connection was lost


def with_db_retry(what: str, work):
    """``work()``, tried again on a fresh connection when the database connection was lost.

    Only outside an enclosing transaction (a retry inside one would see a half-done transaction);
    after the last delay the error goes up.
    """
    for delay in (*DB_RETRY_DELAYS, None):
        try:
            return work()
        except (OperationalError, InterfaceError) as exc:
            if delay is None or connection.in_atomic_block:
                raise
            log.warning("database connection lost while %s (%s); reconnecting in %.1fs", what,
                        str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, delay)
            try:
                connection.close()
            except Exception:  # closing a broken connection may complain; it is gone either way
                pass
            time.sleep(delay)


class DjangoSink:
    """Implements trainer.sink.Sink for one Run."""

    def __init__(self, run: Run | int, flush_seconds: float = 2.0, max_buffer: int = 400, *, live: bool = True):
        """``live=False`` (``manage.py import_run`` loading a finished run's files): no websocket
        messages and no review sampling, only the rows."""
        self.run_id = run.pk if isinstance(run, Run) else int(run)
        self.live = live
        self.flush_seconds = flush_seconds
        self.max_buffer = max_buffer
        self.publish_failures = 0
        self.review_failures = 0
        self.flushes = 0
        self._pace_noted = False  # a control ahead of its run says so once (DjangoSink._pace)
        self._metrics: dict[tuple[int, str, str], float] = {}
        self._records: list[dict[str, Any]] = []
        self._max_step: int | None = None
        self._last_flush = time.monotonic()

    # ---- the Sink protocol ---------------------------------------------------------------
    def metrics(self, step: int, role: str, values: dict[str, float]) -> None:
        for name, value in values.items():
            number = _number(value)
            if number is not None:
                self._metrics[(int(step), role or "", str(name)[:100])] = number
        self._saw_step(step)
        self._maybe_flush()

    def samples(self, step: int, records: list[dict[str, Any]]) -> None:
        for record in records:
            self._records.append({"step": step, **record})
        # no _saw_step: a step's samples come before its metrics (sent at its end), and a flush between the two
        # would set current_step to a step whose curves are not written yet (a viewer catching up from Postgres
        # after a Redis outage then missed that step's points: tests/fault/test_redis_outage.py)
        self._maybe_flush()

    def checkpoint(self, step: int, path: str, *, earlier: bool = False) -> None:
        """``earlier``: a checkpoint of a step before this job's (written whole just before a worker died, reported
        by the resume): recorded without moving the run's current step (a multi-GPU job's own sink writes no step
        after it, and would otherwise set the run back to it when it closes)."""
        if not earlier:
            self._saw_step(step)
        self.flush()
        with_db_retry("recording a checkpoint", lambda: self._write_checkpoint(int(step), str(path)))
        # the page's checkpoint field: the path as a viewer who is not an admin may see it (its folder's name), the
        # whole path for admins' sockets (apps/runs/consumers.py picks)
        self._send({"type": "checkpoint", "step": int(step), "path": server_path(str(path), None)},
                   admin={"path": str(path)})
        _after_checkpoint(self.run_id, int(step), str(path))

    def progress(self, step: int, phase: str) -> None:
        """Where the running step is: a websocket message, and the newest one kept in Redis for a
        page that connects mid-step. No database write (twice a step would be cheap, but a step's
        phase is not history)."""
        message = {"type": "progress", "step": int(step), "phase": str(phase)[:32], "at": time.time()}
        remember_progress(self.run_id, message)
        self._send(message)

    def _write_checkpoint(self, step: int, path: str) -> None:
        with transaction.atomic():
            Checkpoint.objects.update_or_create(run_id=self.run_id, step=step, defaults={"path": path})
            Run.objects.filter(pk=self.run_id).update(checkpoint_path=path, heartbeat_at=timezone.now())
            if not RunEvent.objects.filter(run_id=self.run_id, kind=RunEvent.Kind.NOTABLE, step=step,
                                           message=f"checkpoint at step {step}").exists():
                RunEvent.objects.create(run_id=self.run_id, kind=RunEvent.Kind.NOTABLE, step=step,
                                        message=f"checkpoint at step {step}", data={"path": path})

    def control(self) -> Control:
        self.flush()
        self._watchdog()
        run = with_db_retry("reading the run's controls",
                            lambda: Run.objects.only("id", "status", "requested", "control_of").get(pk=self.run_id))
        stop = run.requested == "cancel" or run.status != Status.RUNNING
        if not stop and not run.requested and run.control_of_id and self.live:
            run, stop = self._pace(run)
        answers = {field: self._review(hook, run) for field, hook in hooks.CONTROL.items()}
        return Control(pause=run.requested == "pause", stop=stop, verdicts=list(answers.pop("verdicts", None) or []),
                       **answers)

    def _pace(self, run: Run) -> tuple[Run, bool]:
        """A control keeps its run's length in steps: the same config, but a run and its control stopped by
        ``train.time_limit_minutes`` beside each other made different numbers of steps (15 against 12 when the run's
        card was busier), and their comparison then mixed the reward's effect with the extra steps.

        - Once its run has finished or been cancelled at step N, the control stops at step N (it ends finished).
        - While its run trains with a time limit and the control has caught up with it, the control waits at the
          step boundary (looking again every PACE_POLL_SECONDS, at most PACE_MAX_WAIT_SECONDS) until the run moves
          on or ends; the job's heartbeat thread keeps beating, and a pause or cancel of the control ends the wait.
        A control slower than its run still stops at its own time limit, with fewer steps (the compare view says
        so). Returns the control's row as last read and whether to stop."""
        me = self._max_step or 0
        waited = 0.0
        while True:
            twin = with_db_retry("reading the run a control follows", lambda: Run.objects.filter(
                pk=run.control_of_id).only("id", "status", "current_step", "total_steps", "config").first())
            if twin is None:
                return run, False
            if twin.status in (Status.FINISHED, Status.CANCELLED):
                if me < twin.current_step or twin.current_step >= twin.total_steps:  # not ahead, or it made them all
                    return run, False
                with_db_retry("noting where a control stopped", lambda: run.notable(
                    f"stopped at step {me}: its run (run {twin.pk}) ended at step {twin.current_step}, and a control "
                    "keeps its run's length in steps", step=me))
                return run, True
            limited = ((twin.config or {}).get("train") or {}).get("time_limit_minutes") or 0
            if not (limited and me >= twin.current_step):
                return run, False
            if twin.status != Status.RUNNING or waited >= PACE_MAX_WAIT_SECONDS:
                # ahead of a run that is not training (paused, queued, failed) or slower than the cap: the control
                # trains on at its own pace, and says so once
                self._pace_note(run, twin, me, waited)
                return run, False
            if waited == 0.0:
                log.info("control run %s at step %s waits for run %s (step %s)", self.run_id, me, twin.pk,
                         twin.current_step)
            time.sleep(PACE_POLL_SECONDS)
            waited += PACE_POLL_SECONDS
            run = with_db_retry("reading the run's controls", lambda: Run.objects.only(
                "id", "status", "requested", "control_of").get(pk=self.run_id))
            if run.requested in ("cancel", "pause") or run.status != Status.RUNNING:
                return run, run.requested == "cancel" or run.status != Status.RUNNING

    def _pace_note(self, run: Run, twin: Run, me: int, waited: float) -> None:
        if self._pace_noted:
            return
        self._pace_noted = True
        why = (f"it waited {waited:.0f} s at step {me}" if twin.status == Status.RUNNING
               else f"its run is {twin.status} at step {twin.current_step}")
        log.warning("control run %s trains on ahead of run %s: %s", self.run_id, twin.pk, why)
        try:
            with_db_retry("noting a control ahead of its run", lambda: run.notable(
                f"ahead of its run (run {twin.pk}): {why}; it trains on at its own pace, so the two may end at "
                "different steps", step=me))
        except Exception as exc:  # a courtesy note; training goes on
            log.warning("could not note the pacing of run %s: %s", self.run_id, exc)

    def _watchdog(self) -> None:
        """Health rules at the step boundary; a rule that pauses sets the request read just below."""
        try:
            check_run(Run.objects.get(pk=self.run_id))
        except Exception as exc:  # the watchdog must never be what stops training
            log.warning("watchdog check failed for run %s: %s", self.run_id, exc)

    def _review(self, hook, run: Run):
        """A review hook's answer, read again on a fresh connection if the database connection was
        lost (each hook claims its items in one transaction); a failing hook is logged (once as a run
        event) and never stops training."""
        try:
            return with_db_retry(f"reading {hook.__name__}", lambda: hook(run))
        except Exception as exc:
            self.review_failures += 1
            log.warning("review hook %s failed for run %s: %s", hook.__name__, run.pk, exc)
            if self.review_failures == 1:
                try:
                    with_db_retry("recording a review failure", lambda: run.notable(
                        f"review verdicts could not be read ({type(exc).__name__}: {str(exc)[:200]}); "
                        "training continues without them", kind=RunEvent.Kind.WATCHDOG))
                except Exception as note_exc:  # the note is a courtesy; training goes on without it
                    log.warning("could not record the review failure of run %s: %s", run.pk, note_exc)
            return None

    def close(self) -> None:
        self.flush()

    # ---- writing -------------------------------------------------------------------------
    def _saw_step(self, step) -> None:
        step = int(step)
        self._max_step = step if self._max_step is None else max(self._max_step, step)

    def _maybe_flush(self) -> None:
        big = len(self._metrics) + len(self._records) >= self.max_buffer
        if big or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Write everything buffered in one transaction, then tell the live page."""
        metrics, records = self._metrics, self._records
        self._metrics, self._records = {}, []
        self._last_flush = time.monotonic()
        by_kind = _split(records)
        try:
            written = with_db_retry("writing reports", lambda: self._write(metrics, by_kind))
        except Exception:  # keep them for a later flush (close() tries once more)
            self._metrics = {**metrics, **self._metrics}
            self._records = records + self._records
            raise
        self.flushes += 1
        if not self.live:
            return
        _enqueue_for_review(self.run_id, by_kind)
        self._publish_metrics(metrics)
        self._publish_samples(written)

    def _write(self, metrics: dict, by_kind: dict) -> list[dict]:
        with transaction.atomic():
            self._write_metrics(metrics)
            written = self._write_samples(by_kind)
            fields = {"heartbeat_at": timezone.now()}
            if self._max_step is not None:
                fields["current_step"] = self._max_step
            Run.objects.filter(pk=self.run_id).update(**fields)
        return written

    def _write_metrics(self, metrics: dict) -> None:
        if not metrics:
            return
        rows = [Metric(run_id=self.run_id, step=s, role=r, name=n, value=v) for (s, r, n), v in metrics.items()]
        Metric.objects.bulk_create(rows, update_conflicts=True, unique_fields=["run", "step", "role", "name"],
                                   update_fields=["value"], batch_size=1000)

    def _write_samples(self, by_kind: dict[str, dict[str, dict]]) -> list[dict]:
        """Upsert tasks, rubrics, attempts, grades (in that order, so keys resolve) and events."""
        run_id = self.run_id
        tasks = _upsert(Task, [_task(run_id, r) for r in by_kind["task"].values()],
                        ["step", "role", "question", "answer", "valid", "pass_rate", "document_id", "format", "data"])
        task_ids = _ids(Task, run_id, {r.get("task_key") for k in ("rubric", "attempt") for r in by_kind[k].values()})
        _upsert(Rubric, [_rubric(run_id, r, task_ids) for r in by_kind["rubric"].values()],
                ["task", "task_key", "step", "text", "priority", "data"])
        attempts = _upsert(Attempt, [_attempt(run_id, r, task_ids) for r in by_kind["attempt"].values()],
                           ["task", "task_key", "role", "step", "text", "reward", "turns", "passages", "token_ids",
                            "loss_mask", "data"])
        grades = list(by_kind["grade"].values())
        attempt_ids = _ids(Attempt, run_id, {r.get("attempt_key") for r in grades})
        rubric_ids = _ids(Rubric, run_id, {r.get("rubric_key") for r in grades})
        _upsert(Grade, [_grade(run_id, r, attempt_ids, rubric_ids) for r in grades],
                ["attempt", "rubric", "attempt_key", "rubric_key", "step", "score", "judge_text", "data"])
        events = [RunEvent(run_id=run_id, kind=RunEvent.Kind.NOTABLE, step=_int(r.get("step")), key=str(r["key"])[:200],
                           message=_text(r.get("message")) or "event", data=_json(r.get("data") or {}))
                  for r in by_kind["event"].values()]
        if events:
            RunEvent.objects.bulk_create(events, ignore_conflicts=True)
        return [_preview("task", t) for t in tasks] + [_preview("attempt", a) for a in attempts]

    # ---- publishing ----------------------------------------------------------------------
    def _send(self, data: dict, admin: dict | None = None) -> None:
        if not publish(self.run_id, data, admin=admin):
            self.publish_failures += 1

    def _publish_metrics(self, metrics: dict) -> None:
        """One message per role and flush: its newest step's values, earlier steps in ``earlier``."""
        for message in metric_messages(metrics):
            self._send(message)

    def _publish_samples(self, previews: list[dict]) -> None:
        for preview in previews[-SAMPLE_MESSAGES_PER_FLUSH:]:
            self._send(preview)


def metric_messages(metrics: dict[tuple[int, str, str], float]) -> list[dict]:
    """(step, role, name) -> value as websocket messages: one per role, newest step last.

    ``{"type": "metric", "step", "role", "values"}`` carries the role's newest step; when the
    flush held more steps of the role, ``earlier`` lists them (``[{"step", "values"}]``, oldest
    first). A fast run (many steps per flush) thus costs one message per role, not one per step:
    the channel layer handles ~100 messages/s on a busy 2-core machine (benchmarks/live.py).

    >>> metric_messages({(2, "r", "a"): 2.0, (1, "r", "a"): 1.0, (1, "s", "a"): float("nan")})
    [{'type': 'metric', 'step': 1, 'role': 's', 'values': {'a': None}}, \
{'type': 'metric', 'step': 2, 'role': 'r', 'values': {'a': 2.0}, 'earlier': [{'step': 1, 'values': {'a': 1.0}}]}]
    """
    by_role: dict[str, dict[int, dict[str, float | None]]] = {}
    for (step, role, name), value in metrics.items():
        by_role.setdefault(role, {}).setdefault(step, {})[name] = value if math.isfinite(value) else None
    out = []
    for role, steps in sorted(by_role.items(), key=lambda kv: (max(kv[1]), kv[0])):
        ordered = sorted(steps)
        message = {"type": "metric", "step": ordered[-1], "role": role, "values": dict(sorted(steps[ordered[-1]].items()))}
        if len(ordered) > 1:
            message["earlier"] = [{"step": s, "values": dict(sorted(steps[s].items()))} for s in ordered[:-1]]
        out.append(message)
    return out


# ---- record -> row helpers (records come from another process's code: be forgiving) -------
KINDS = SAMPLE_KINDS


def _split(records: list[dict]) -> dict[str, dict[str, dict]]:
    """Records by kind, then by key (the last record of a key wins: one INSERT may not hit a row twice)."""
    out: dict[str, dict[str, dict]] = {k: {} for k in KINDS}
    for record in records:
        kind = record.get("kind")
        if kind not in out or record.get("key") in (None, ""):
            log.warning("sample record without a known kind or a key ignored: %r", str(record)[:200])
            continue
        out[kind][str(record["key"])[:200]] = record
    return out


def _upsert(model, rows: list, fields: list[str]) -> list:
    if rows:
        model.objects.bulk_create(rows, update_conflicts=True, unique_fields=["run", "key"], update_fields=fields,
                                  batch_size=500)
    return rows


def _ids(model, run_id: int, keys: set) -> dict[str, int]:
    keys = {str(k) for k in keys if k not in (None, "")}
    if not keys:
        return {}
    return dict(model.objects.filter(run_id=run_id, key__in=keys).values_list("key", "id"))


def _task(run_id, r) -> Task:
    return Task(run_id=run_id, key=str(r["key"])[:200], step=_int(r.get("step")), role=_text(r.get("role"))[:32],
                question=_text(r.get("question")), answer=_text(r.get("answer")), valid=bool(r.get("valid", True)),
                pass_rate=_number(r.get("pass_rate")), document_id=_text(r.get("document_id"))[:200],
                format=_text(r.get("format"))[:64], data=_json(r.get("data") or {}))


def _rubric(run_id, r, task_ids) -> Rubric:
    task_key = _text(r.get("task_key"))[:200]
    return Rubric(run_id=run_id, key=str(r["key"])[:200], task_id=task_ids.get(task_key), task_key=task_key,
                  step=_int(r.get("step")), text=_text(r.get("text")), priority=_text(r.get("priority"))[:16],
                  data=_json(r.get("data") or {}))


def _attempt(run_id, r, task_ids) -> Attempt:
    task_key = _text(r.get("task_key"))[:200]
    return Attempt(run_id=run_id, key=str(r["key"])[:200], task_id=task_ids.get(task_key), task_key=task_key,
                   role=_text(r.get("role"))[:32], step=_int(r.get("step")), text=_text(r.get("text")),
                   reward=_number(r.get("reward")), turns=_json(r.get("turns") or []),
                   passages=_json(r.get("passages") or []), token_ids=[int(t) for t in r.get("token_ids") or []],
                   loss_mask=[int(m) for m in r.get("loss_mask") or []], data=_json(r.get("data") or {}))


def _grade(run_id, r, attempt_ids, rubric_ids) -> Grade:
    attempt_key, rubric_key = _text(r.get("attempt_key"))[:200], _text(r.get("rubric_key"))[:200]
    return Grade(run_id=run_id, key=str(r["key"])[:200], attempt_id=attempt_ids.get(attempt_key),
                 rubric_id=rubric_ids.get(rubric_key), attempt_key=attempt_key, rubric_key=rubric_key,
                 step=_int(r.get("step")), score=_number(r.get("score")), judge_text=_text(r.get("judge_text")),
                 data=_json(r.get("data") or {}))


def _preview(kind: str, row) -> dict:
    """The small websocket message for a written task or attempt."""
    base = {"type": "sample", "kind": kind, "key": row.key, "role": row.role, "step": row.step}
    if kind == "task":
        return {**base, "question": row.question[:TEXT_PREVIEW], "answer": row.answer[:300], "valid": row.valid,
                "pass_rate": row.pass_rate, "why_invalid": why_invalid(row)[:300]}
    reward = row.reward if row.reward is None or math.isfinite(row.reward) else None
    return {**base, "text": row.text[:TEXT_PREVIEW], "reward": reward, "task_key": row.task_key}


def _text(value) -> str:
    """Text for Postgres: None -> "", NUL characters (which Postgres refuses) dropped."""
    return "" if value is None else str(value).replace("\x00", "")


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _json(value):
    """A JSON-safe copy: dataclasses (Passage) become dicts, non-finite floats None, NUL characters dropped."""
    if isinstance(value, dict):
        return {_text(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json(dataclasses.asdict(value))
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return _text(value)
    if hasattr(value, "tolist"):
        return _json(value.tolist())
    return _text(value)


def _enqueue_for_review(run_id: int, by_kind: dict[str, dict[str, dict]]) -> None:
    """Hand the stored tasks / rubrics / grades to the flush hooks (apps.review's sampling); never stops a run."""
    records = [r for kind in ("task", "rubric", "grade") for r in by_kind[kind].values()]
    if not records:
        return
    for hook in hooks.FLUSH:
        try:
            hook(run_id, records)
        except Exception:
            log.exception("flush hook %s failed for run %s; the samples are stored but not queued",
                          hook.__name__, run_id)


def _after_checkpoint(run_id: int, step: int, path: str) -> None:
    """The checkpoint hooks (apps.evals' automatic evaluations); never stops a run."""
    for hook in hooks.CHECKPOINT:
        try:
            hook(run_id, step, path)
        except Exception:
            log.exception("checkpoint hook %s failed for run %s step %s", hook.__name__, run_id, step)
