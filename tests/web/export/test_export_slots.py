"""Export downloads cannot starve the database pool (apps/export/slots.py).

- Past ``SELFPLAY_EXPORTS_PER_PROCESS`` downloads at once the next is a 429 with ``Retry-After``;
  the slot comes back when a download ends, is closed before it started, or fails.
- Served through the real ASGI application: the request's own connection is back before the first
  chunk (the download runs on its reader's connection only), and a download that fails mid-stream
  ends its body there (no exception out of the application, which would leave daphne's client
  waiting forever) with its slot and every database session given back.

tests/fault/test_export_pool.py sends three times the pool of downloads to a real server.
"""
from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from apps.export import slots, stream as export
from tests.web.export.test_export_disconnect import _readers, _scope, _sessions as _sessions_here, _token
from tests.web.export.test_export_disconnect import close_sync_thread_connection  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def one_export_at_a_time(monkeypatch):
    monkeypatch.setenv("SELFPLAY_EXPORTS_PER_PROCESS", "1")
    assert slots.running() == 0
    yield
    assert slots.running() == 0, "an export slot was never given back"


def _sessions() -> set[int]:
    """The other sessions on the test database, asked on a connection closed again at once (this runs on
    a thread of the default executor, which would keep it open after the test)."""
    try:
        return _sessions_here()
    finally:
        connection.close()


def _url(run, kind="attempts", fmt="jsonl") -> str:
    return f"/api/v1/runs/{run.pk}/export/{kind}.{fmt}"


def test_a_download_past_the_limit_is_a_429_with_retry_after(filled_run, reader, client):
    client.force_login(reader)
    first = client.get(_url(filled_run))  # streaming: it holds the only slot until it is read or closed
    assert first.status_code == 200 and slots.running() == 1

    refused = client.get(_url(filled_run, "tasks"))
    assert refused.status_code == 429
    assert refused["Retry-After"] == str(slots.RETRY_AFTER)
    assert "exports at once" in refused.json()["error"]

    lines = b"".join(first.streaming_content).splitlines()  # read to the end: the slot is free again
    assert len(lines) == filled_run.attempts.count() and slots.running() == 0
    again = client.get(_url(filled_run, "tasks", "parquet"))
    assert again.status_code == 200
    again.close()  # closed before a byte was read (the client went away at once)
    assert slots.running() == 0
    pairs = client.get(_url(filled_run, "pairs"))
    assert pairs.status_code == 200 and b"".join(pairs.streaming_content)


def test_a_bad_request_takes_no_slot(filled_run, reader, client):
    client.force_login(reader)
    ticket = slots.take()
    try:
        assert client.get(_url(filled_run) + "?step_min=x").status_code == 400  # filters are checked first
        assert client.get("/api/v1/runs/999999/export/tasks.jsonl").status_code == 404
    finally:
        ticket.release()


def test_the_limit_follows_the_pool(settings, monkeypatch):
    monkeypatch.delenv("SELFPLAY_EXPORTS_PER_PROCESS")
    options = settings.DATABASES["default"].setdefault("OPTIONS", {})
    monkeypatch.setitem(options, "pool", {"min_size": 2, "max_size": 16})
    assert slots.capacity() == 4  # a quarter of one process's pool: 4 downloads hold at most 8 connections
    monkeypatch.setitem(options, "pool", {"max_size": 2})
    assert slots.capacity() == 1
    monkeypatch.delitem(options, "pool")
    assert slots.capacity() == slots.DEFAULT_UNPOOLED


class Client:
    """The ASGI side of a client that reads the whole response."""

    def __init__(self):
        self.messages: list[dict] = []
        self.done = asyncio.Event()
        self.sessions_at_first_chunk: set[int] | None = None
        self.before: set[int] = set()
        self.asked = 0

    async def receive(self) -> dict:
        self.asked += 1
        if self.asked == 1:  # the request (no body)
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.messages.append(message)
        if message["type"] == "http.response.body" and message.get("body") and self.sessions_at_first_chunk is None:
            self.sessions_at_first_chunk = await sync_to_async(_sessions, thread_sensitive=False)()
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.done.set()

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


async def _serve(run, user, path: str) -> Client:
    from selfplay_web.asgi import application

    client, token = Client(), await sync_to_async(_token)(user)
    client.before = await sync_to_async(_sessions, thread_sensitive=False)()
    await asyncio.wait_for(application(_scope(path, token), client.receive, client.send), 30)
    return client


async def _no_sessions_left(before: set[int]) -> set[int]:
    began = time.monotonic()
    while time.monotonic() - began < 3:
        left = (await sync_to_async(_sessions, thread_sensitive=False)()) - before
        if not left and not _readers():
            return left
        await asyncio.sleep(0.05)
    return left


@pytest.mark.asyncio
async def test_under_asgi_a_download_holds_only_its_readers_connection(filled_run, reader, monkeypatch):
    """Pages of 5 rows: while the first chunk is sent, the request's connection (authentication, the
    plan) is already back, and the reader thread's is the only session of the download."""
    monkeypatch.setattr(export, "PAGE", 5)
    client = await _serve(filled_run, reader, _url(filled_run))
    assert client.messages[0]["status"] == 200
    lines = client.body().splitlines()
    assert len(lines) == await sync_to_async(filled_run.attempts.count)()
    assert len(client.sessions_at_first_chunk - client.before) <= 1, "the request kept its own connection"
    assert not await _no_sessions_left(client.before)
    await sync_to_async(connections.close_all)()


@pytest.mark.asyncio
async def test_under_asgi_a_download_that_fails_midway_ends_and_gives_everything_back(filled_run, reader, monkeypatch):
    """The second page query fails (the database went away): the application returns normally, the
    body stops after the first page (short of X-Export-Last-Id), and the slot and sessions are back."""
    monkeypatch.setattr(export, "PAGE", 5)
    real_fetch, calls = export.fetch, []

    def failing_fetch(sql, params):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("the database went away")
        return real_fetch(sql, params)

    monkeypatch.setattr(export, "fetch", failing_fetch)
    client = await _serve(filled_run, reader, _url(filled_run))
    assert client.messages[0]["status"] == 200
    lines = client.body().splitlines()
    assert len(lines) == 5
    last_id = dict((k.decode(), v.decode()) for k, v in client.messages[0]["headers"])["X-Export-Last-Id"]
    assert json.loads(lines[-1])["id"] < int(last_id)  # the client can tell the file is short, and resume
    assert slots.running() == 0
    assert not await _no_sessions_left(client.before)
    await sync_to_async(connections.close_all)()
