"""A client that drops an export download: the project's real ASGI application serves a real export
(``selfplay_web.asgi.application``, called in process the way daphne calls it) to a client whose
``receive()`` answers ``http.disconnect`` once the first body chunk has been sent. The read-ahead
thread exits and its database session is gone, whether the thread was waiting to hand over a page or
in the middle of a page query (cancelled: well before the slowed query would end); the event loop
keeps running meanwhile."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import connection, connections

from apps.export import fetch as export_fetch, stream as export

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_QUERY = 20  # seconds: the page query slowed with pg_sleep, which a stopped download must not wait out


@pytest_asyncio.fixture(autouse=True)
async def close_sync_thread_connection(request):
    """The database queries of this test run through sync_to_async in asgiref's one shared sync
    thread, whose connection would stay open after the test (and keep the test database in use)."""
    yield
    if request.node.get_closest_marker("asyncio"):
        await sync_to_async(connections.close_all)()


def _readers() -> list:
    return [t for t in threading.enumerate() if t.name == "export-read-ahead"]


def _sessions() -> set[int]:
    """Backend pids of the other sessions on the test database."""
    with connection.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return {pid for (pid,) in cur.fetchall()}


def _token(user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=user).key


class DroppingClient:
    """The ASGI side of a client that reads the response head and one body chunk, then hangs up (once
    ``hang_up_when()``, if given, has returned)."""

    def __init__(self, hang_up_when=None):
        self.messages: list[dict] = []
        self.got_body = asyncio.Event()
        self.at_first_chunk: dict = {}
        self.asked = 0
        self.hang_up_when = hang_up_when

    async def receive(self) -> dict:
        self.asked += 1
        if self.asked == 1:  # the request (no body)
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.got_body.wait()
        if self.hang_up_when is not None:
            await self.hang_up_when()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.messages.append(message)
        if message["type"] == "http.response.body" and message.get("body") and not self.got_body.is_set():
            self.at_first_chunk["readers"] = len(_readers())
            self.got_body.set()


def _scope(path: str, token: str) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [(b"host", b"testserver"), (b"authorization", f"Token {token}".encode())],
            "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}


async def _ticks_while(task: asyncio.Task, period: float = 0.05) -> float:
    """The longest gap between event-loop ticks (of ``period``) while ``task`` runs."""
    worst, last = 0.0, time.monotonic()
    while not task.done():
        await asyncio.sleep(period)
        now = time.monotonic()
        worst, last = max(worst, now - last - period), now
    return worst


async def _drop_download(run, user, fmt: str, hang_up_when=None) -> tuple[DroppingClient, float, float]:
    """Serve ``run``'s attempts to a client that hangs up after the first chunk; (client, seconds from
    the hang-up until no reader thread and no new database session is left, worst loop stall)."""
    from selfplay_web.asgi import application

    before = await sync_to_async(_sessions)()
    client = DroppingClient(hang_up_when)
    app = asyncio.create_task(application(_scope(f"/api/v1/runs/{run.pk}/export/attempts.{fmt}",
                                                 await sync_to_async(_token)(user)), client.receive, client.send))
    stall = asyncio.create_task(_ticks_while(app))
    await asyncio.wait_for(client.got_body.wait(), 30)
    dropped = time.monotonic()
    await asyncio.wait_for(app, 10)
    while _readers() or (await sync_to_async(_sessions)()) - before:
        if time.monotonic() - dropped > SLOW_QUERY / 4:  # a query left to run would take SLOW_QUERY
            break
        await asyncio.sleep(0.02)
    gone = time.monotonic() - dropped
    assert not _readers(), f"the read-ahead thread is still running {gone:.1f} s after the client hung up"
    leftover = (await sync_to_async(_sessions)()) - before
    assert not leftover, f"database sessions {leftover} stay open {gone:.1f} s after the client hung up"
    return client, gone, await stall


async def _many_attempts(run, n: int) -> None:
    from apps.episodes.models import Attempt, Task

    def add():
        task = Task.objects.filter(run=run).first()
        Attempt.objects.bulk_create([Attempt(run=run, task=task, key=f"bulk{i}", task_key=task.key, role="reasoner",
                                             step=9, text="x" * 50, reward=0.5, turns=[], passages=[],
                                             token_ids=[1, 2], loss_mask=[1, 1], data={}) for i in range(n)])

    await sync_to_async(add)()


@pytest.mark.asyncio
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
async def test_a_dropped_download_stops_the_reader_blocked_on_a_full_queue(filled_run, reader, monkeypatch, fmt):
    """Small pages: the reader has filled its queue and waits to hand over the next page."""
    await _many_attempts(filled_run, 400)
    monkeypatch.setattr(export, "PAGE", 10)
    monkeypatch.setattr(export, "PARQUET_PAGE", 10)
    monkeypatch.setattr(export, "ROW_GROUP", 10)
    real_fetch, threads = export.fetch, []
    monkeypatch.setattr(export, "fetch", lambda sql, params: threads.append(threading.current_thread().name)
                        or real_fetch(sql, params))
    client, gone, stall = await _drop_download(filled_run, reader, fmt)
    assert client.at_first_chunk["readers"] == 1  # the thread was running when the client went away
    assert threads and set(threads) == {"export-read-ahead"}  # every page query ran off the event loop
    assert client.messages[0]["status"] == 200
    sent = b"".join(m.get("body", b"") for m in client.messages[1:])
    assert sent and len(sent) < 400 * 50  # stopped early: most of the rows were never sent
    if fmt == "jsonl":
        assert json.loads(sent.splitlines()[0])["run_id"] == filled_run.pk
    assert stall < 1.0, f"the event loop stalled {stall:.2f} s"


@pytest.mark.asyncio
async def test_a_dropped_download_stops_the_reader_in_a_slow_page_query(filled_run, reader, monkeypatch):
    """The reader is inside a page query that takes seconds (``pg_sleep`` before the page) when the
    client hangs up: the query is cancelled, the thread ends and its session closes."""
    monkeypatch.setattr(export, "PAGE", 5)
    calls = _slow_after_first_page(monkeypatch)
    cancels = _counted_cancels(monkeypatch)
    # the client hangs up once the reader is seen in its slowed page query (pg_stat_activity), not at a
    # moment that may fall before the query starts
    def query_in_flight():  # on a thread of its own: the app's sync work holds asgiref's shared thread
        try:
            _wait_for_a_page_query_in_flight()
        finally:
            connection.close()

    client, gone, stall = await _drop_download(filled_run, reader, "jsonl",
                                               hang_up_when=sync_to_async(query_in_flight, thread_sensitive=False))
    assert set(calls) == {"export-read-ahead"} and len(calls) >= 2  # the second page query was under way
    assert client.at_first_chunk["readers"] == 1
    # one cancel request (it opens a server connection), sent off the event loop's thread (from the thread
    # that closed the download, or one of its own when the loop closed it), and the loop never waited on the
    # slowed query (it would stall for about SLOW_QUERY)
    assert len(cancels) == 1 and cancels[0] != threading.current_thread().name, cancels
    assert stall < SLOW_QUERY / 10, f"the event loop stalled {stall:.2f} s"


def _counted_cancels(monkeypatch) -> list:
    """The names of the threads that sent a cancel request for a reader's page query, as they are sent."""
    real_cancel, cancels = export_fetch._cancel, []

    def counted_cancel(conn):
        cancels.append(threading.current_thread().name)
        real_cancel(conn)

    monkeypatch.setattr(export_fetch, "_cancel", counted_cancel)
    return cancels


def _slow_after_first_page(monkeypatch) -> list:
    real_fetch, calls = export_fetch.fetch, []

    def slow_fetch(sql, params):
        calls.append(threading.current_thread().name)
        if len(calls) > 1:
            real_fetch(f"SELECT pg_sleep({SLOW_QUERY})", [])
        return real_fetch(sql, params)

    monkeypatch.setattr(export, "fetch", slow_fetch)
    return calls


def _slow_queries_running() -> int:
    """Other sessions of the test database running the slowed page query (pg_sleep) now."""
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                    "pid <> pg_backend_pid() AND state = 'active' AND query LIKE %s", [f"%pg_sleep({SLOW_QUERY})%"])
        return cur.fetchone()[0]


def _wait_for_a_page_query_in_flight(timeout: float = 10.0) -> None:
    """Until another session of the test database runs the slowed page query (pg_sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _slow_queries_running():
            return
        time.sleep(0.02)
    raise AssertionError(f"no page query in flight after {timeout} s")


def test_closing_the_stream_or_setting_stop_ends_a_reader_in_a_page_query(filled_run, monkeypatch):
    """Outside ASGI (WSGI, manage.py export): closing the generator, or setting its stop event from
    another thread, ends the reader while its page query runs: the query is cancelled (one cancel
    request, the query gone from pg_stat_activity), not waited out."""
    cancels = _counted_cancels(monkeypatch)
    monkeypatch.setattr(export, "PAGE", 5)
    _slow_after_first_page(monkeypatch)
    p = export.plan("attempts", filled_run, export.parse_filters("attempts", {}))
    chunks = export.stream(p, "jsonl")
    assert next(chunks) and len(_readers()) == 1
    _wait_for_a_page_query_in_flight()  # the reader is in its second page query now (seen in pg_stat_activity)
    began = time.monotonic()
    chunks.close()  # waits for the reader (at most 5 s: a query left to run would outlast that)
    took = time.monotonic() - began
    assert not _readers() and not _slow_queries_running()
    assert len(cancels) == 1 and took < SLOW_QUERY / 4

    stop = threading.Event()
    chunks = export.stream(p, "parquet", stop)

    def stop_in_the_slow_query():  # another thread (a download's disconnect) sets stop, mid-query
        _wait_for_a_page_query_in_flight()
        connection.close()  # this thread's own connection
        stop.set()

    stopper = threading.Thread(target=stop_in_the_slow_query)
    stopper.start()
    began = time.monotonic()
    with pytest.raises(export_fetch.Stopped):
        b"".join(chunks)
    took = time.monotonic() - began
    stopper.join()
    assert not _readers() and not _slow_queries_running()
    assert len(cancels) == 2 and took < SLOW_QUERY / 4


def test_a_reader_stopped_between_two_pages_starts_no_further_page_query(filled_run, monkeypatch):
    """The stop comes while the reader is between two pages (its connection idle: a cancel request
    would find nothing to cancel): the next page query is never started, and the reader ends."""
    monkeypatch.setattr(export, "PAGE", 5)
    real_fetch, stop, between, ran = export_fetch.fetch, threading.Event(), threading.Event(), []

    def fetch_after_a_pause(sql, params):
        if ran:  # the second page: the download stops before its query begins
            between.set()
            assert stop.wait(5)
        rows = real_fetch(sql, params)
        ran.append(len(rows))
        return rows

    monkeypatch.setattr(export, "fetch", fetch_after_a_pause)
    p = export.plan("attempts", filled_run, export.parse_filters("attempts", {}))
    chunks = export.stream(p, "jsonl", stop)
    assert next(chunks)
    assert between.wait(5)
    stop.set()
    with pytest.raises(export_fetch.Stopped):
        next(chunks)
    began = time.monotonic()
    while _readers() and time.monotonic() - began < 2:
        time.sleep(0.02)
    assert not _readers()
    assert ran == [5], f"page queries run: {ran} (one after the stop)"



def test_a_reader_past_its_last_page_query_gets_no_cancel_request(monkeypatch):
    """The download stops after the reader ran its last page query, while it waits to hand over the
    end (queue full): nothing is cancelled (a cancel request opens a server connection of its own
    for nothing). A complete read sends none either."""
    cancels = _counted_cancels(monkeypatch)
    ended = threading.Event()

    def pages():
        yield export_fetch.fetch("SELECT 1", [])
        yield export_fetch.fetch("SELECT 2", [])
        ended.set()

    before = _sessions()
    got = export_fetch.read_ahead(pages, ahead=1)
    assert next(got) == [(1,)]  # the reader hands over page 2, then waits to hand over the end
    assert ended.wait(5)
    began = time.monotonic()
    while _sessions() - before and time.monotonic() - began < 2:  # the reader is done with its connection
        time.sleep(0.02)
    got.close()  # the client goes away
    assert not _readers()
    assert cancels == []
    assert list(export_fetch.read_ahead(pages, ahead=1)) == [[(1,)], [(2,)]]
    assert not _readers() and cancels == []


def test_a_stop_between_the_stop_check_and_the_query_still_cancels_it(monkeypatch):
    """The race: the reader passed fetch's stop check, then the download stopped and its cancel request found
    the connection idle (the server ignores it), then the page query began. The stopping side cancels again
    while the reader is inside fetch, so the slowed query ends well before its 20 s (the old single cancel left
    it running: the reader outlived the 5 s join and the query stayed in pg_stat_activity)."""
    cancels = _counted_cancels(monkeypatch)
    real, calls, in_window, go = export_fetch.connection, [], threading.Event(), threading.Event()

    class HeldOpen:  # Django's connection, but the page query's ensure_connection waits for `go`
        def __getattr__(self, name):
            return getattr(real, name)

        def ensure_connection(self):
            calls.append(threading.current_thread().name)
            if len(calls) == 2:  # the reader's first is its own; the second is fetch's, past the stop check
                in_window.set()
                assert go.wait(10)
            real.ensure_connection()

    monkeypatch.setattr(export_fetch, "connection", HeldOpen())
    stop = threading.Event()
    got = export_fetch.read_ahead(lambda: iter([export_fetch.fetch(f"SELECT pg_sleep({SLOW_QUERY})", [])]),
                                  ahead=1, stop=stop)
    ended = []

    def read():
        try:
            list(got)
        except export_fetch.Stopped:
            ended.append(time.monotonic())

    caller = threading.Thread(target=read)
    caller.start()
    assert in_window.wait(10)  # the reader is past its stop check, its query not begun
    stop.set()  # the download stops now: the first cancel request finds the connection idle
    threading.Timer(0.5, go.set).start()  # then the query begins
    began = time.monotonic()
    caller.join(timeout=SLOW_QUERY)
    assert ended and ended[0] - began < SLOW_QUERY / 4
    deadline = time.monotonic() + 5
    while (_readers() or _slow_queries_running()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _readers() and not _slow_queries_running()
    assert len(cancels) >= 2  # the first found the connection idle; a later one cancelled the query
