"""The export view: ``GET /api/v1/runs/<id>/export/<kind>.jsonl|.parquet`` (streamed), with its
OpenAPI description. What it sends is built in apps/export/stream.py."""
from __future__ import annotations

import logging
import threading

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated

from apps.api.errors import ERROR, error_response
from apps.export import slots
from apps.export import stream as export
from apps.export.stream import (
    CONTENT_TYPES, FORMATS, KINDS, REVIEW_VALUES, ExportError, columns, headers, parse_filters, plan, stream,
)
from apps.export.fetch import Stopped
from apps.runs.models import Run

logger = logging.getLogger("selfplay.export")

def _for_handler(request, chunks, stop: threading.Event):
    """An async iterator under ASGI (Django would otherwise buffer a sync iterator into one list);
    the sync generator itself under WSGI and the test client."""
    from django.core.handlers.asgi import ASGIRequest

    if not isinstance(getattr(request, "_request", request), ASGIRequest):
        return chunks
    return Download(chunks, stop)


class Download:
    """The chunks of a sync generator as an async iterator, each made in the request's sync thread.

    When the client goes away Django does not close the async iterator it was given: it cancels the
    task (a ``CancelledError`` here, if it waits for a chunk) or, when the cancel lands while a chunk
    is being sent, calls ``response.close()``, which calls ``close()`` (off the event loop). Both set
    ``stop``, which ends the export's read-ahead thread within a fraction of a second, then close the
    generator (at once if it is idle, else in the sync thread as soon as its chunk is done). Nothing
    here waits on the event loop.

    An error while a chunk is made (the database went away mid-download) ends the body there and is
    logged: once the response has started, an exception out of the application leaves daphne's client
    waiting forever and Django never closes the response (nor gives its database connection back). The
    client sees a file that stops short of ``X-Export-Last-Id`` (a Parquet file without its footer) and
    resumes with ``?after=``."""

    def __init__(self, chunks, stop: threading.Event):
        from asgiref.sync import sync_to_async

        self.chunks, self.stop = chunks, stop
        self.running = threading.Lock()  # held while the generator makes a chunk
        self.step = sync_to_async(self._next, thread_sensitive=True)

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self.step()
        except BaseException:  # CancelledError (the client went away) or an error making the chunk
            self.close()
            raise
        if chunk is _END:
            raise StopAsyncIteration
        return chunk

    def _next(self):
        with self.running:
            try:
                if self.stop.is_set():
                    return _END
                return next(self.chunks, _END)
            except Stopped:
                return _END
            except Exception:
                logger.exception("export download failed mid-stream; the body ends early")
                self.stop.set()
                return _END
            finally:
                if self.stop.is_set():
                    self.chunks.close()

    def close(self) -> None:
        """Stop the download (from any thread, without waiting for the generator)."""
        self.stop.set()
        if self.running.acquire(blocking=False):
            try:
                self.chunks.close()
            finally:
                self.running.release()

    async def aclose(self) -> None:
        self.close()


_END = object()


EXAMPLE_ATTEMPT = ('{"id": 41, "run_id": 7, "key": "3:12:0:r1", "task_key": "3:12:0", "task_id": 17, '
                   '"role": "reasoner", "step": 3, "iteration": null, "text": "... \\\\boxed{4}", "reward": 1.0, '
                   '"turns": [{"role": "assistant", "text": "... \\\\boxed{4}"}], "passages": [], '
                   '"token_ids": [1, 2, 3], "loss_mask": [1, 1, 1], "data": {"boxed": "4"}, '
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
        description=(export.__doc__.split("\n\n", 1)[1] + "\n\nColumns (type codes: int, float, str, bool, iteration = "
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
                                              "X-Export-Last-Id, X-Export-Has-More; X-Export-Empty (a sentence) says why an "
                                              "export with no row is empty.",
                examples=[OpenApiExample("attempts.jsonl line", value=EXAMPLE_ATTEMPT, media_type="application/x-ndjson"),
                          OpenApiExample("pairs.jsonl line", value=EXAMPLE_PAIR, media_type="application/x-ndjson")]),
            (200, "application/vnd.apache.parquet"): OpenApiResponse(
                OpenApiTypes.BINARY, description="A Parquet file with the same columns, one row group per 4,000 rows."),
            400: OpenApiResponse(ERROR, description="A bad filter, kind or format.", examples=[
                OpenApiExample("bad filter", value={"error": "step_min must be an integer, got 'abc'"})]),
            401: OpenApiResponse(ERROR, description="Not logged in / no token."),
            404: OpenApiResponse(ERROR, description="No such run."),
            429: OpenApiResponse(ERROR, description="This server process streams as many exports as it may at "
                                                    "once; retry after the seconds in Retry-After."),
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
    ticket = slots.take()
    if ticket is None:
        response = error_response(f"This server is streaming {slots.capacity()} exports at once, as many as it may; "
                                  f"retry in {slots.RETRY_AFTER} s.", 429)
        response["Retry-After"] = str(slots.RETRY_AFTER)
        return response
    try:
        stop = threading.Event()
        chunks = slots.Guarded(stream(p, fmt, stop), ticket)
        response = StreamingHttpResponse(_for_handler(request, chunks, stop), content_type=CONTENT_TYPES[fmt])
        for name, value in headers(p, fmt).items():
            response[name] = value
    except BaseException:
        ticket.release()
        raise
    return response
