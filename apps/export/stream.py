"""Streaming dataset export of a run: ``GET /api/v1/runs/<id>/export/<kind>.jsonl|.parquet`` and
``manage.py export``.

Kinds (``KINDS``): ``tasks``, ``rubrics``, ``attempts`` (turns, passages, token ids and loss
masks), ``grades``, ``pairs`` (preference pairs: two attempts of one task and role with different
rewards, chosen = the higher reward), ``verdicts`` (human review: the items a reviewer approved or flagged, never a pending one) and ``config`` (one row).
Columns and their types are fixed per kind (``columns(kind)``, the same in both formats):
integers stay integers, floats are always written as floats, strings are never null ("" when
empty), lists are always lists. The method-specific ``data`` (and ``snapshot`` / ``suspicious``)
is a JSON object in JSONL (``datasets`` reads its keys as columns of a struct) and its JSON text in
Parquet (whose columns need one fixed type, and the keys differ by method and role).

Filters (query parameters; one that does not apply to the kind, or a bad value, is a 400):
``role``, ``step_min`` / ``step_max``, ``iteration_min`` / ``iteration_max`` (``data.iteration``
where a recipe records it), ``review`` (approved | flagged | pending | none: the sample's own
review item, or its task's for attempts and pairs), ``valid`` (true | false: the task's),
``after`` (resume cursor) and ``limit`` (most rows, or tasks for pairs).

Resuming: rows are sent in increasing ``id`` (``task_id`` for pairs: all pairs of a task come
together). The response headers say ``X-Export-Cursor-Field`` (id | task_id), ``X-Export-Last-Id``
(the cursor value of the last row this response will send, fixed when it starts) and
``X-Export-Has-More`` (true when ``limit`` cut it short). An interrupted JSONL download resumes
with ``?after=<cursor value of the last complete line>``; a Parquet one with ``?after=`` the last
id of the previous complete file (use ``limit`` to download in parts).

Memory stays constant: pages of ``PAGE`` rows are read by keyset (``id > last``) and each page is
encoded and sent before the next is read. The page query selects plain columns (numbers, text, JSON
and arrays as text: cheap for Postgres) and ``apps/export/rows.py`` encodes them: JSONL lines
byte for byte equal to the reference formatters Postgres runs (``apps/export/sql.py``, still
used for the rare rows whose turns / passages hold non-string fields), and for Parquet one Arrow
record batch per page, written as one row group of ``pyarrow.parquet.ParquetWriter`` into a buffer
drained after every group. The view and its OpenAPI description are in ``apps/export/views.py``.
"""
from __future__ import annotations

import ctypes
import io
import json
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from django.db import connection
from django.db.models import Exists, F, OuterRef, Q, Subquery, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.export import rows as export_rows
from apps.export.fetch import fetch, read_ahead
from apps.export.sql import lines_sql
from apps.review.models import ReviewItem
from apps.runs.sealed import redact, redact_overrides

PAGE = 2000  # rows per JSONL page (one chunk of the response)
PARQUET_PAGE = 1000  # rows per page read for Parquet: a page's Python objects are most of the memory used
ROW_GROUP = 4000  # rows per Parquet row group (pages converted to Arrow batches, written together)
FORMATS = ("jsonl", "parquet")
CONTENT_TYPES = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}


class ExportError(ValueError):
    """A bad export request; the message says what to change (answered with a 400)."""


# ---- filters -------------------------------------------------------------------------------------

FILTERS = {  # kind -> the filters it accepts (after and limit: every kind but config)
    "tasks": {"role", "step", "iteration", "review", "valid"},
    "rubrics": {"step", "iteration", "review"},
    "attempts": {"role", "step", "iteration", "review", "valid"},
    "grades": {"step", "iteration", "review"},
    "pairs": {"role", "step", "review", "valid"},
    "verdicts": {"step", "review"},
    "config": set(),
}
KINDS = tuple(FILTERS)
PARAMS = {"role": "role", "step_min": "step", "step_max": "step", "iteration_min": "iteration",
          "iteration_max": "iteration", "review": "review", "valid": "valid", "after": "cursor", "limit": "cursor"}
REVIEW_VALUES = ("approved", "flagged", "pending", "none")


@dataclass
class Filters:
    role: str | None = None
    step_min: int | None = None
    step_max: int | None = None
    iteration_min: int | None = None
    iteration_max: int | None = None
    review: str | None = None
    valid: bool | None = None
    after: int = 0
    limit: int | None = None


def parse_filters(kind: str, params) -> Filters:
    """Filters from query parameters (a QueryDict or dict); ExportError names the bad one."""
    if kind not in FILTERS:
        raise ExportError(f"unknown export kind {kind!r}; choose one of {', '.join(KINDS)}")
    out = Filters()
    for name in params:
        value = params.get(name)
        if name == "format":  # DRF's own format override; the URL's suffix decides
            continue
        group = PARAMS.get(name)
        if group is None:
            raise ExportError(f"unknown filter {name!r}; filters: {', '.join(PARAMS)}")
        if value in (None, ""):
            continue
        accepted = FILTERS[kind] | ({"cursor"} if kind != "config" else set())
        if group not in accepted:
            allowed = sorted(p for p, g in PARAMS.items() if g in accepted)
            raise ExportError(f"filter {name!r} does not apply to {kind}; {kind} accepts "
                              f"{', '.join(allowed) or 'no filters'}")
        setattr(out, name, _value(name, value))
    if kind == "verdicts" and out.review in ("pending", "none"):
        raise ExportError(f"verdicts holds reviewed items only (approved or flagged); review={out.review} has no "
                          "verdict to export. Pending items are in the review queue: GET /api/v1/review/queue/?run=<id>")
    if out.step_min is not None and out.step_max is not None and out.step_min > out.step_max:
        raise ExportError(f"step_min ({out.step_min}) is larger than step_max ({out.step_max})")
    if out.iteration_min is not None and out.iteration_max is not None and out.iteration_min > out.iteration_max:
        raise ExportError(f"iteration_min ({out.iteration_min}) is larger than iteration_max ({out.iteration_max})")
    return out


def _value(name: str, value: str):
    if name == "role":
        return str(value)[:32]
    if name == "review":
        if value not in REVIEW_VALUES:
            raise ExportError(f"review must be one of {', '.join(REVIEW_VALUES)}, got {value!r}")
        return value
    if name == "valid":
        if str(value).lower() not in ("true", "false", "1", "0"):
            raise ExportError(f"valid must be true or false, got {value!r}")
        return str(value).lower() in ("true", "1")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ExportError(f"{name} must be an integer, got {value!r}") from None
    if name in ("after", "limit") and number < (1 if name == "limit" else 0):
        raise ExportError(f"{name} must be {'at least 1' if name == 'limit' else '0 or more'}, got {number}")
    return number


# ---- columns -------------------------------------------------------------------------------------

def _s(v) -> str:
    return json.dumps("" if v is None else str(v))


def _i(v) -> str:
    return "null" if v is None else str(int(v))


def _f(v) -> str:
    if v is None:
        return "null"
    v = float(v)
    return repr(v) if math.isfinite(v) else "null"


def _b(v) -> str:
    return "null" if v is None else ("true" if v else "false")


TYPES = export_rows.TYPES  # code -> arrow type (apps/export/sql.py has the JSON formatter of each)
ENCODERS = {"int": _i, "float": _f, "str": _s, "bool": _b}  # Python-made lines: pairs and config

# kind -> [(column, type code, source: a model field or an annotation below)]
COLUMNS = {
    "tasks": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"), ("step", "int", "step"),
              ("iteration", "iteration", "x_iteration"), ("role", "str", "role"), ("question", "str", "question"),
              ("answer", "str", "answer"), ("valid", "bool", "valid"), ("pass_rate", "float", "pass_rate"),
              ("document_id", "str", "document_id"), ("format", "str", "format"), ("data", "json", "x_data"),
              ("review_status", "str", "x_review")],
    "rubrics": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"),
                ("task_key", "str", "task_key"), ("step", "int", "step"), ("iteration", "iteration", "x_iteration"),
                ("text", "str", "text"), ("priority", "str", "priority"), ("data", "json", "x_data"),
                ("review_status", "str", "x_review"), ("review_edit", "str", "x_edit")],
    "attempts": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"),
                 ("task_key", "str", "task_key"), ("task_id", "int", "task_id"), ("role", "str", "role"),
                 ("step", "int", "step"), ("iteration", "iteration", "x_iteration"), ("text", "str", "text"),
                 ("reward", "float", "reward"), ("turns", "turns", "turns"), ("passages", "passages", "passages"),
                 ("token_ids", "ints", "token_ids"), ("loss_mask", "ints", "loss_mask"),
                 ("data", "json", "x_data"), ("task_valid", "bool", "task__valid")],
    "grades": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"),
               ("attempt_key", "str", "attempt_key"), ("rubric_key", "str", "rubric_key"), ("step", "int", "step"),
               ("iteration", "iteration", "x_iteration"), ("score", "float", "score"),
               ("judge_text", "str", "judge_text"), ("data", "json", "x_data"), ("review_status", "str", "x_review")],
    "verdicts": [("id", "int", "id"), ("run_id", "int", "run_number"), ("kind", "str", "kind"), ("key", "str", "key"),
                 ("step", "int", "step"), ("task_key", "str", "task_key"), ("status", "str", "status"),
                 ("edit", "str", "edit"), ("reason", "str", "reason"), ("reviewer", "str", "reviewer_name"),
                 ("reviewed_at", "str", "x_reviewed_at"), ("applied_at", "str", "x_applied_at"),
                 ("priority", "str", "priority"), ("judge_score", "float", "judge_score"), ("sampled", "bool", "sampled"),
                 ("suspicious", "json", "x_suspicious"), ("snapshot", "json", "x_snapshot")],
    "pairs": [("task_id", "int", None), ("task_key", "str", None), ("role", "str", None), ("step", "int", None),
              ("prompt", "str", None), ("answer", "str", None), ("chosen", "str", None), ("rejected", "str", None),
              ("chosen_reward", "float", None), ("rejected_reward", "float", None), ("chosen_key", "str", None),
              ("rejected_key", "str", None)],
    "config": [("run_id", "int", None), ("method", "str", None), ("model", "str", None), ("corpus", "str", None),
               ("status", "str", None), ("steps", "int", None), ("config", "str", None), ("overrides", "str", None),
               ("created_at", "str", None)],
}


def columns(kind: str) -> list[tuple[str, str]]:
    """[(column name, type code)] of a kind, in file order."""
    return [(name, code) for name, code, _ in COLUMNS[kind]]


def arrow_schema(kind: str) -> pa.Schema:
    return pa.schema([(name, TYPES[code]) for name, code, _ in COLUMNS[kind]])


# ---- querysets -----------------------------------------------------------------------------------

MODELS = {"tasks": Task, "rubrics": Rubric, "attempts": Attempt, "grades": Grade, "verdicts": ReviewItem}
REVIEW_KIND = {"tasks": "task", "rubrics": "rubric", "grades": "grade", "attempts": "task", "pairs": "task"}


def _json_text(field: str):
    return Cast(field, TextField())


def _review_items(run_id: int, kind: str, key_ref: str):
    return ReviewItem.objects.filter(run_number=run_id, kind=REVIEW_KIND[kind], key=OuterRef(key_ref))


def _review_q(run_id: int, kind: str, review: str, key_ref: str) -> Q:
    items = _review_items(run_id, kind, key_ref)
    if review == "none":
        return ~Exists(items)
    return Exists(items.filter(status=review))


def queryset(kind: str, run, f: Filters):
    """The filtered rows of a kind (not pairs / config), with the annotations its columns read."""
    model = MODELS[kind]
    if kind == "verdicts":
        qs = model.objects.filter(run_number=run.pk).annotate(
            x_reviewed_at=Cast("reviewed_at", TextField()), x_applied_at=Cast("applied_at", TextField()),
            x_suspicious=_json_text("suspicious"), x_snapshot=_json_text("snapshot"))
        qs = qs.exclude(status="pending")  # verdicts only: a pending item has none
        if f.review:
            qs = qs.filter(status=f.review)
    else:
        qs = model.objects.filter(run_id=run.pk).annotate(x_data=_json_text("data"), x_iteration=KT("data__iteration"))
        key_ref = "task_key" if kind == "attempts" else "key"
        if f.review:
            qs = qs.filter(_review_q(run.pk, kind, f.review, key_ref))
        if kind in ("tasks", "rubrics", "grades"):
            items = _review_items(run.pk, kind, "key")
            text = TextField()
            qs = qs.annotate(x_review=Coalesce(Subquery(items.values("status")[:1]), Value(""), output_field=text))
            if kind == "rubrics":
                qs = qs.annotate(x_edit=Coalesce(Subquery(items.values("edit")[:1]), Value(""), output_field=text))
        if f.iteration_min is not None:
            qs = qs.filter(data__iteration__gte=f.iteration_min)
        if f.iteration_max is not None:
            qs = qs.filter(data__iteration__lte=f.iteration_max)
    if f.role is not None:
        qs = qs.filter(role=f.role)
    if f.valid is not None:
        qs = qs.filter(valid=f.valid) if kind == "tasks" else qs.filter(task__valid=f.valid)
    if f.step_min is not None:
        qs = qs.filter(step__gte=f.step_min)
    if f.step_max is not None:
        qs = qs.filter(step__lte=f.step_max)
    return qs


# ---- pages of rows -------------------------------------------------------------------------------

@dataclass
class Plan:
    """What one response sends: rows with cursor in (after, last_id]."""

    kind: str
    run: object
    filters: Filters
    last_id: int | None  # None: no row to send
    has_more: bool

    @property
    def cursor_field(self) -> str:
        return "task_id" if self.kind == "pairs" else "id"


def _cursor_qs(kind: str, run, f: Filters):
    if kind == "pairs":
        tasks = Task.objects.filter(run_id=run.pk)
        if f.valid is not None:
            tasks = tasks.filter(valid=f.valid)
        if f.review:
            tasks = tasks.filter(_review_q(run.pk, "pairs", f.review, "key"))
        if f.step_min is not None:
            tasks = tasks.filter(step__gte=f.step_min)
        if f.step_max is not None:
            tasks = tasks.filter(step__lte=f.step_max)
        return tasks
    return queryset(kind, run, f)


def plan(kind: str, run, f: Filters) -> Plan:
    """Fix the last cursor value this response sends (rows added later wait for the next request)."""
    if kind == "config":
        return Plan(kind, run, f, run.pk, False)
    ids = _cursor_qs(kind, run, f).filter(id__gt=f.after).order_by("id").values_list("id", flat=True)
    if f.limit:
        window = list(ids[f.limit - 1:f.limit + 1])
        if window:
            return Plan(kind, run, f, window[0], len(window) > 1)
        last = ids.order_by("-id").first()
        return Plan(kind, run, f, last, False)
    return Plan(kind, run, f, ids.order_by("-id").first(), False)


def _python_rows(p: Plan, size: int):
    """Row tuples of the kinds encoded in Python (config, pairs), a page at a time."""
    if p.last_id is None:
        return
    if p.kind == "config":
        yield [_config_row(p.run)]
        return
    yield from _pair_pages(p, max(size // 8, 1))


def _aliased(p: Plan):
    """The plan's rows in cursor order with its columns selected as c0, c1, ... (and those names):
    the page query that export_sql wraps."""
    names = [f"c{i}" for i in range(len(COLUMNS[p.kind]))]
    exprs = {name: F(src) for name, (_, _, src) in zip(names, COLUMNS[p.kind])}
    return queryset(p.kind, p.run, p.filters).filter(id__lte=p.last_id).order_by("id").values(**exprs), names


def python_lines(p: Plan, size: int):
    """Lists of JSONL lines of the kinds made in Python (pairs, config)."""
    encoders = [ENCODERS[code] for _, code, _ in COLUMNS[p.kind]]
    template = "{" + ",".join(f"{json.dumps(name)}:%s" for name, _, _ in COLUMNS[p.kind]) + "}"
    for rows in _python_rows(p, size):
        yield [template % tuple(enc(v) for enc, v in zip(encoders, row)) for row in rows]


def raw_pages(p: Plan, size: int | None = None, binary_arrays: bool = False):
    """Lists of plain rows (``export_rows.raw_sql``: column values as Postgres sends them cheaply) of
    the database kinds, ``size`` at a time by keyset."""
    if p.last_id is None:
        return
    size = size or PAGE
    qs, _ = _aliased(p)
    cols = columns(p.kind)
    cursor = p.filters.after
    while True:
        sql, params = qs.filter(id__gt=cursor)[:size].query.sql_with_params()
        rows = fetch(export_rows.raw_sql(cols, sql, binary_arrays), params)
        if not rows:
            return
        yield rows
        cursor = rows[-1][0]
        if len(rows) < size:
            return


def reference_lines(p: Plan, ids: list[int]) -> dict[int, str]:
    """{id: JSONL line} of the rows ``ids`` built by Postgres (apps/export/sql.py, the reference
    format), for the rare rows export_rows does not encode itself."""
    qs, _ = _aliased(p)
    sql, params = qs.filter(id__in=ids).query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute(lines_sql(columns(p.kind), sql), params)
        return dict(cur.fetchall())


def _config_row(run) -> tuple:
    return (run.pk, run.method, run.model_name, run.corpus.name if run.corpus_id else run.corpus_name, run.status,
            run.total_steps, json.dumps(redact(run.config)), json.dumps(redact_overrides(run.overrides)),
            run.created_at.isoformat())


def _pair_pages(p: Plan, page_tasks: int):
    tasks = _cursor_qs("pairs", p.run, p.filters).filter(id__lte=p.last_id).order_by("id").values_list(
        "id", "key", "question", "answer")
    cursor = p.filters.after
    while True:
        batch = list(tasks.filter(id__gt=cursor)[:page_tasks])
        if not batch:
            return
        yield pairs_of(batch, p.filters.role)
        cursor = batch[-1][0]
        if len(batch) < page_tasks:
            return


def pairs_of(tasks: list[tuple], role: str | None) -> list[tuple]:
    """Preference pairs of the attempts of ``tasks`` [(id, key, question, answer)]: within one task
    and role, every two attempts with different rewards, chosen = the higher reward."""
    attempts = Attempt.objects.filter(task_id__in=[t[0] for t in tasks], reward__isnull=False).order_by("id")
    if role is not None:
        attempts = attempts.filter(role=role)
    groups: dict[tuple, list] = {}
    for task_id, arole, key, text, reward, step in attempts.values_list("task_id", "role", "key", "text", "reward",
                                                                         "step"):
        if math.isfinite(reward):
            groups.setdefault((task_id, arole), []).append((reward, key, text, step))
    rows = []
    for task_id, key, question, answer in tasks:
        for (tid, arole), group in sorted((k, v) for k, v in groups.items() if k[0] == task_id):
            ranked = sorted(group, key=lambda a: (-a[0], a[1]))
            for i, hi in enumerate(ranked):
                for lo in ranked[i + 1:]:
                    if hi[0] > lo[0]:
                        rows.append((task_id, key, arole, hi[3], question, answer, hi[2], lo[2], hi[0], lo[0],
                                     hi[1], lo[1]))
    return rows


# ---- encoders ------------------------------------------------------------------------------------

def jsonl_chunks(p: Plan, stop: threading.Event | None = None):
    """Bytes of the JSONL file, one chunk per page; setting ``stop`` ends the stream (``Stopped``)."""
    if p.kind in ("pairs", "config"):
        for lines in read_ahead(lambda: python_lines(p, PAGE), 0, stop):
            if lines:
                yield ("\n".join(lines) + "\n").encode()
        return
    cols, size = columns(p.kind), PAGE
    for rows in read_ahead(lambda: raw_pages(p, size), stop=stop):
        yield export_rows.jsonl(cols, rows, lambda ids: reference_lines(p, ids))


def record_batches(p: Plan, size: int, stop: threading.Event | None = None):
    """Arrow record batches of the kind's schema, one per page. For the database kinds the reader
    thread (``read_ahead``) builds them too, while this thread writes Parquet (which releases the GIL)."""
    cols = columns(p.kind)
    if p.kind in ("pairs", "config"):
        for rows in read_ahead(lambda: _python_rows(p, size), 0, stop):
            if rows:
                yield export_rows.record_batch(cols, rows, None)
        return

    def batches():
        for rows in raw_pages(p, size, binary_arrays=True):
            yield export_rows.record_batch(cols, rows, lambda ids: reference_lines(p, ids))

    yield from read_ahead(batches, stop=stop)


class _Drain(io.RawIOBase):
    """A write-only file whose bytes are taken out after every row group."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        data = bytes(b)
        self.parts.append(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def parquet_chunks(p: Plan, stop: threading.Event | None = None):
    """Bytes of the Parquet file: each page becomes an Arrow record batch at once (the same values as
    the JSONL lines); every ``ROW_GROUP`` rows of batches are written as one row group, drained at once."""
    schema = arrow_schema(p.kind)
    sink = _Drain()
    writer = pq.ParquetWriter(sink, schema, compression="zstd", memory_pool=export_rows.POOL)
    group: list[pa.RecordBatch] = []
    try:
        for batch in record_batches(p, PARQUET_PAGE, stop):
            group.append(batch)
            if sum(b.num_rows for b in group) >= ROW_GROUP:
                yield _write_group(writer, sink, group)
                group = []
        if group:
            yield _write_group(writer, sink, group)
    finally:
        writer.close()
    yield sink.take()


def _write_group(writer, sink: _Drain, batches: list) -> bytes:
    table = pa.Table.from_batches(batches)
    writer.write_table(table, row_group_size=table.num_rows)
    del table, batches[:]
    release_memory()
    return sink.take()


def release_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``), so that what a row
    group's temporaries freed does not stay in the server's resident memory."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # glibc only
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def stream(p: Plan, fmt: str, stop: threading.Event | None = None):
    """The file's bytes in chunks; setting ``stop`` (a download whose client went away) ends the
    generator with ``export_fetch.Stopped`` within a fraction of a second, its reader thread with it."""
    if fmt not in FORMATS:
        raise ExportError(f"format must be jsonl or parquet, got {fmt!r}")
    return jsonl_chunks(p, stop) if fmt == "jsonl" else parquet_chunks(p, stop)


def empty_reason(kind: str, run, f: Filters | None = None) -> str:
    """Why an export of ``kind`` has no row (one sentence for the page and the X-Export-Empty header)."""
    filtered = f is not None and any(getattr(f, name) not in (None, 0) for name in
                                     ("role", "step_min", "step_max", "iteration_min", "iteration_max", "review",
                                      "valid", "after"))
    if filtered:
        return "No row matches these filters; the same export without filters has rows."
    if kind == "verdicts":
        pending = ReviewItem.objects.filter(run_number=run.pk, status="pending").count()
        if pending:
            return (f"Nobody has reviewed this run yet: {pending} item{'s wait' if pending != 1 else ' waits'} in the review "
                    f"queue (/review/?run={run.pk}); verdicts appear here once approved or flagged.")
        return ("Nothing of this run was sent to review: its review config samples no items and no detector marked "
                "one suspicious.")
    if kind == "pairs":
        if not Task.objects.filter(run_id=run.pk).exists():
            return "The run has recorded no tasks yet, so there are no answers to pair."
        return "No task has two answers with different rewards (a pair needs a higher and a lower reward)."
    if run.current_step == 0 and run.is_active:
        return "The run has not finished its first step yet; rows appear as it records samples."
    if run.imported:
        return f"This imported run's folder held no {kind} (an import keeps what the folder's samples.jsonl holds)."
    return f"The run recorded no {kind}."


def headers(p: Plan, fmt: str) -> dict[str, str]:
    extra = {}
    if p.last_id is None and p.kind != "config":
        extra["X-Export-Empty"] = empty_reason(p.kind, p.run, p.filters)
    return {**extra,"Content-Disposition": f'attachment; filename="run-{p.run.pk}-{p.kind}.{fmt}"',
            "X-Export-Cursor-Field": p.cursor_field, "X-Export-Last-Id": "" if p.last_id is None else str(p.last_id),
            "X-Export-Has-More": "true" if p.has_more else "false", "Cache-Control": "no-store"}


def write_file(run, kind: str, fmt: str, path, params=None) -> tuple[int, Plan]:
    """``manage.py export``: the same stream into a file; returns (bytes written, plan)."""
    p = plan(kind, run, parse_filters(kind, params or {}))
    written = 0
    target = Path(path)
    special = target.exists() and not target.is_file()  # /dev/null, a pipe: written in place
    tmp = target if special else target.with_name(f".{target.name}.part")
    try:
        with open(tmp, "wb") as fh:
            for chunk in stream(p, fmt):
                fh.write(chunk)
                written += len(chunk)
        if tmp != target:
            os.replace(tmp, target)  # a failed export leaves an earlier file at the path whole
    finally:
        if tmp != target and tmp.exists():
            tmp.unlink()
    return written, p
