"""Streaming dataset export of a run: ``GET /api/v1/runs/<id>/export/<kind>.jsonl|.parquet`` and
``manage.py export``.

Kinds (``KINDS``): ``tasks``, ``rubrics``, ``attempts`` (turns, passages, token ids and loss
masks), ``grades``, ``pairs`` (preference pairs: two attempts of one task and role with different
rewards, chosen = the higher reward), ``verdicts`` (human review) and ``config`` (one row).
Columns and their types are fixed per kind (``columns(kind)``, the same in both formats):
integers stay integers, floats are always written as floats, strings are never null ("" when
empty), lists are always lists, and the method-specific ``data`` (and ``snapshot`` /
``suspicious``) is a JSON *string*, so every row of a file has the same type in every column.

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
encoded and sent before the next is read; Parquet writes one row group per page through
``pyarrow.parquet.ParquetWriter`` into a buffer that is drained after every group.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from django.db.models import Exists, F, Func, OuterRef, Q, Subquery, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.db.models.expressions import RawSQL

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated

from apps.api.errors import error_response
from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.review.models import ReviewItem
from apps.runs.models import Run

PAGE = 2000
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


def _raw(v) -> str:  # JSON text made by Postgres holding only strings and integers
    return v if v else "[]"


def _passages_json(v) -> str:
    if not v or v == "[]":
        return "[]"
    return json.dumps(_passages(v))


def _passages(v) -> list:
    """Passages as {document_id, chunk_id, title, text: str, score: float}; other shapes are skipped."""
    out = []
    for p in json.loads(v) if isinstance(v, str) else (v or []):
        if isinstance(p, dict):
            score = p.get("score")
            score = float(score) if isinstance(score, (int, float)) and math.isfinite(score) else None
            out.append({"document_id": str(p.get("document_id") or ""), "chunk_id": str(p.get("chunk_id") or ""),
                        "title": str(p.get("title") or ""), "text": str(p.get("text") or ""), "score": score})
    return out


def _list(v):
    return json.loads(v) if isinstance(v, str) else list(v or [])


def _iteration(v):
    try:
        return int(v) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None


TURN = pa.struct([("role", pa.string()), ("text", pa.string())])
PASSAGE = pa.struct([("document_id", pa.string()), ("chunk_id", pa.string()), ("title", pa.string()),
                     ("text", pa.string()), ("score", pa.float64())])
TYPES = {  # code -> (arrow type, JSON encoder, python value for arrow)
    "int": (pa.int64(), _i, lambda v: None if v is None else int(v)),
    "float": (pa.float64(), _f, lambda v: None if v is None or not math.isfinite(float(v)) else float(v)),
    "str": (pa.string(), _s, lambda v: "" if v is None else str(v)),
    "bool": (pa.bool_(), _b, lambda v: None if v is None else bool(v)),
    "iteration": (pa.int64(), lambda v: _i(_iteration(v)), _iteration),
    "turns": (pa.list_(TURN), _raw, _list),
    "passages": (pa.list_(PASSAGE), _passages_json, _passages),
    "ints": (pa.list_(pa.int64()), _raw, _list),
}

# kind -> [(column, type code, source: a model field or an annotation below)]
COLUMNS = {
    "tasks": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"), ("step", "int", "step"),
              ("iteration", "iteration", "x_iteration"), ("role", "str", "role"), ("question", "str", "question"),
              ("answer", "str", "answer"), ("valid", "bool", "valid"), ("pass_rate", "float", "pass_rate"),
              ("document_id", "str", "document_id"), ("format", "str", "format"), ("data", "str", "x_data"),
              ("review_status", "str", "x_review")],
    "rubrics": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"),
                ("task_key", "str", "task_key"), ("step", "int", "step"), ("iteration", "iteration", "x_iteration"),
                ("text", "str", "text"), ("priority", "str", "priority"), ("data", "str", "x_data"),
                ("review_status", "str", "x_review"), ("review_edit", "str", "x_edit")],
    "attempts": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"),
                 ("task_key", "str", "task_key"), ("task_id", "int", "task_id"), ("role", "str", "role"),
                 ("step", "int", "step"), ("iteration", "iteration", "x_iteration"), ("text", "str", "text"),
                 ("reward", "float", "reward"), ("turns", "turns", "x_turns"), ("passages", "passages", "x_passages"),
                 ("token_ids", "ints", "x_token_ids"), ("loss_mask", "ints", "x_loss_mask"),
                 ("data", "str", "x_data"), ("task_valid", "bool", "task__valid")],
    "grades": [("id", "int", "id"), ("run_id", "int", "run_id"), ("key", "str", "key"),
               ("attempt_key", "str", "attempt_key"), ("rubric_key", "str", "rubric_key"), ("step", "int", "step"),
               ("iteration", "iteration", "x_iteration"), ("score", "float", "score"),
               ("judge_text", "str", "judge_text"), ("data", "str", "x_data"), ("review_status", "str", "x_review")],
    "verdicts": [("id", "int", "id"), ("run_id", "int", "run_number"), ("kind", "str", "kind"), ("key", "str", "key"),
                 ("step", "int", "step"), ("task_key", "str", "task_key"), ("status", "str", "status"),
                 ("edit", "str", "edit"), ("reason", "str", "reason"), ("reviewer", "str", "reviewer_name"),
                 ("reviewed_at", "str", "x_reviewed_at"), ("applied_at", "str", "x_applied_at"),
                 ("priority", "str", "priority"), ("judge_score", "float", "judge_score"), ("sampled", "bool", "sampled"),
                 ("suspicious", "str", "x_suspicious"), ("snapshot", "str", "x_snapshot")],
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
    return pa.schema([(name, TYPES[code][0]) for name, code, _ in COLUMNS[kind]])


# ---- querysets -----------------------------------------------------------------------------------

_TURNS_SQL = """(SELECT coalesce(json_agg(json_build_object('role', coalesce(t.v->>'role', ''),
  'text', coalesce(t.v->>'text', '')) ORDER BY t.n), '[]'::json)::text
  FROM jsonb_array_elements(CASE WHEN jsonb_typeof({table}.turns) = 'array' THEN {table}.turns ELSE '[]'::jsonb END)
  WITH ORDINALITY AS t(v, n) WHERE jsonb_typeof(t.v) = 'object')"""
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
        if f.review == "none":
            qs = qs.none()
        elif f.review:
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
        if kind == "attempts":
            table = Attempt._meta.db_table
            qs = qs.annotate(
                x_turns=RawSQL(_TURNS_SQL.format(table=table), []), x_passages=_json_text("passages"),
                x_token_ids=Cast(Func(F("token_ids"), function="array_to_json"), TextField()),
                x_loss_mask=Cast(Func(F("loss_mask"), function="array_to_json"), TextField()))
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


def pages(p: Plan):
    """Lists of row tuples (in ``columns(kind)`` order), PAGE rows at a time, in cursor order."""
    if p.last_id is None:
        return
    if p.kind == "config":
        yield [_config_row(p.run)]
        return
    if p.kind == "pairs":
        yield from _pair_pages(p)
        return
    sources = [src for _, _, src in COLUMNS[p.kind]]
    qs = queryset(p.kind, p.run, p.filters).filter(id__lte=p.last_id).order_by("id").values_list(*sources)
    cursor = p.filters.after
    while True:
        rows = list(qs.filter(id__gt=cursor)[:PAGE])
        if not rows:
            return
        yield rows
        cursor = rows[-1][0]
        if len(rows) < PAGE:
            return


def _config_row(run) -> tuple:
    return (run.pk, run.method, run.model_name, run.corpus.name if run.corpus_id else run.corpus_name, run.status,
            run.total_steps, json.dumps(run.config), json.dumps(run.overrides), run.created_at.isoformat())


def _pair_pages(p: Plan):
    tasks = _cursor_qs("pairs", p.run, p.filters).filter(id__lte=p.last_id).order_by("id").values_list(
        "id", "key", "question", "answer")
    cursor, page_tasks = p.filters.after, max(PAGE // 8, 1)
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

def jsonl_chunks(p: Plan):
    """Bytes of the JSONL file, one chunk per page."""
    cols = COLUMNS[p.kind]
    encoders = [TYPES[code][1] for _, code, _ in cols]
    template = "{" + ",".join(f"{json.dumps(name)}:%s" for name, _, _ in cols) + "}\n"
    for rows in pages(p):
        yield "".join(template % tuple(enc(v) for enc, v in zip(encoders, row)) for row in rows).encode()


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


def parquet_chunks(p: Plan):
    """Bytes of the Parquet file: one row group per page, drained as soon as it is written."""
    cols, schema = COLUMNS[p.kind], arrow_schema(p.kind)
    converters = [TYPES[code][2] for _, code, _ in cols]
    sink = _Drain()
    writer = pq.ParquetWriter(sink, schema, compression="zstd")
    try:
        for rows in pages(p):
            arrays = [pa.array([conv(row[i]) for row in rows], type=schema.field(i).type)
                      for i, conv in enumerate(converters)]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
            chunk = sink.take()
            if chunk:
                yield chunk
    finally:
        writer.close()
    yield sink.take()


def stream(p: Plan, fmt: str):
    if fmt not in FORMATS:
        raise ExportError(f"format must be jsonl or parquet, got {fmt!r}")
    return jsonl_chunks(p) if fmt == "jsonl" else parquet_chunks(p)


def headers(p: Plan, fmt: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="run-{p.run.pk}-{p.kind}.{fmt}"',
            "X-Export-Cursor-Field": p.cursor_field, "X-Export-Last-Id": "" if p.last_id is None else str(p.last_id),
            "X-Export-Has-More": "true" if p.has_more else "false", "Cache-Control": "no-store"}


def write_file(run, kind: str, fmt: str, path, params=None) -> tuple[int, Plan]:
    """``manage.py export``: the same stream into a file; returns (bytes written, plan)."""
    p = plan(kind, run, parse_filters(kind, params or {}))
    written = 0
    with open(path, "wb") as fh:
        for chunk in stream(p, fmt):
            fh.write(chunk)
            written += len(chunk)
    return written, p


# ---- the view ------------------------------------------------------------------------------------

def _for_handler(request, chunks):
    """An async iterator under ASGI (Django would otherwise buffer a sync iterator into one list);
    the sync generator itself under WSGI and the test client."""
    from django.core.handlers.asgi import ASGIRequest

    if not isinstance(getattr(request, "_request", request), ASGIRequest):
        return chunks
    from asgiref.sync import sync_to_async

    done = object()
    step = sync_to_async(lambda: next(chunks, done), thread_sensitive=True)

    async def agen():
        while (chunk := await step()) is not done:
            yield chunk

    return agen()


EXAMPLE_ATTEMPT = ('{"id": 41, "run_id": 7, "key": "3:12:0:r1", "task_key": "3:12:0", "task_id": 17, '
                   '"role": "reasoner", "step": 3, "iteration": null, "text": "... \\\\boxed{4}", "reward": 1.0, '
                   '"turns": [{"role": "assistant", "text": "... \\\\boxed{4}"}], "passages": [], '
                   '"token_ids": [1, 2, 3], "loss_mask": [1, 1, 1], "data": "{\\"boxed\\": \\"4\\"}", '
                   '"task_valid": true}')
EXAMPLE_PAIR = ('{"task_id": 17, "task_key": "3:12:0", "role": "reasoner", "step": 3, "prompt": "What is 2+2?", '
                '"answer": "4", "chosen": "\\\\boxed{4}", "rejected": "\\\\boxed{5}", "chosen_reward": 1.0, '
                '"rejected_reward": 0.0, "chosen_key": "3:12:0:r1", "rejected_key": "3:12:0:r0"}')


def _schema():
    columns_doc = "; ".join(f"**{k}**: " + ", ".join(f"{n} ({c})" for n, c in columns(k)) for k in KINDS)
    q = OpenApiParameter.QUERY
    return extend_schema(
        operation_id="runs_export",
        summary="Stream a run's data as JSONL or Parquet",
        description=(__doc__.split("\n\n", 1)[1] + "\n\nColumns (type codes: int, float, str, bool, iteration = "
                     "int or null, turns = list of {role, text}, passages = list of {document_id, chunk_id, title, "
                     "text, score}, ints = list of integers): " + columns_doc),
        parameters=[
            OpenApiParameter("kind", str, OpenApiParameter.PATH, enum=list(KINDS), description="What to export."),
            OpenApiParameter("fmt", str, OpenApiParameter.PATH, enum=list(FORMATS), description="File format."),
            OpenApiParameter("role", str, q, description="Only this role (tasks, attempts, pairs).",
                             examples=[OpenApiExample("reasoner", value="reasoner")]),
            OpenApiParameter("step_min", int, q, description="Steps from (inclusive)."),
            OpenApiParameter("step_max", int, q, description="Steps up to (inclusive)."),
            OpenApiParameter("iteration_min", int, q, description="data.iteration from (where recorded)."),
            OpenApiParameter("iteration_max", int, q, description="data.iteration up to."),
            OpenApiParameter("review", str, q, enum=list(REVIEW_VALUES),
                             description="Review status of the sample (its task's for attempts and pairs)."),
            OpenApiParameter("valid", bool, q, description="The task's validity (tasks, attempts, pairs)."),
            OpenApiParameter("after", int, q, description="Resume: only rows whose cursor (X-Export-Cursor-Field) "
                                                          "is larger."),
            OpenApiParameter("limit", int, q, description="At most this many rows (tasks for pairs)."),
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR, description="One JSON object per line; headers X-Export-Cursor-Field, "
                                              "X-Export-Last-Id, X-Export-Has-More.",
                examples=[OpenApiExample("attempts.jsonl line", value=EXAMPLE_ATTEMPT, media_type="application/x-ndjson"),
                          OpenApiExample("pairs.jsonl line", value=EXAMPLE_PAIR, media_type="application/x-ndjson")]),
            (200, "application/vnd.apache.parquet"): OpenApiResponse(
                OpenApiTypes.BINARY, description="A Parquet file with the same columns, one row group per page."),
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="A bad filter, kind or format.", examples=[
                OpenApiExample("bad filter", value={"error": "step_min must be an integer, got 'abc'"})]),
            401: OpenApiResponse(OpenApiTypes.OBJECT, description="Not logged in / no token."),
            404: OpenApiResponse(OpenApiTypes.OBJECT, description="No such run."),
        },
    )


@_schema()
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def export_run(request, run_id: int, kind: str, fmt: str):
    """Any logged-in user may export (reading is open to every account)."""
    run = get_object_or_404(Run.objects.select_related("corpus"), pk=run_id)
    try:
        if fmt not in FORMATS:
            raise ExportError(f"format must be .jsonl or .parquet, got .{fmt}")
        p = plan(kind, run, parse_filters(kind, request.query_params))
    except ExportError as exc:
        return error_response(str(exc))
    response = StreamingHttpResponse(_for_handler(request, stream(p, fmt)), content_type=CONTENT_TYPES[fmt])
    for name, value in headers(p, fmt).items():
        response[name] = value
    return response
