"""Reading an export's pages: keyset page queries on a binary psycopg cursor, read ahead by a thread.

``fetch(sql, params)`` runs one page query on a server-binding psycopg cursor in binary mode
(integers and floats are not parsed from text; ``array_send`` values arrive as bytes).
``read_ahead(pages)`` iterates a page generator in a thread of its own
(with its own database connection), a bounded number of pages ahead: Postgres computes the next
page while the caller encodes this one, so the two processes work at the same time. A stop event
(a download whose client went away) ends the thread within a fraction of a second, cancelling the
page query it may be running, without blocking an event loop; a reader that is between two pages
when the stop comes starts no further page query. Inside a
transaction (tests, a caller's ``atomic`` block) the pages are read inline on the caller's
connection, the only one that sees its uncommitted rows.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time

import psycopg
from django.db import connection, connections

AHEAD = 2  # pages (or record batches) a reader thread may hold ready: memory for a few pages
WAIT = 0.2  # seconds between checks of a stop request while the reader or its caller waits on the queue
_DONE = object()
_reader = threading.local()  # .stop: the stop event of the download a reader thread reads for


def fetch(sql: str, params) -> list[tuple]:
    """All rows of one page query, read in binary on the current thread's connection. On a reader
    thread whose download was stopped it raises ``Stopped`` instead of starting the query: a cancel
    request sent before the query began found the connection idle, and the server ignored it."""
    stop, state = getattr(_reader, "stop", None), getattr(_reader, "state", None)
    if state is not None:
        state.in_query = True  # before the stop check: a stop set after it is cancelled until the query ends
    try:
        if stop is not None and stop.is_set():
            raise Stopped("the download was stopped")
        connection.ensure_connection()
        with psycopg.Cursor(connection.connection) as cur:
            cur.execute(sql, params, binary=True)
            return cur.fetchall()
    finally:
        if state is not None:
            state.in_query = False


def read_ahead(make_pages, ahead: int | None = None, stop: threading.Event | None = None):
    """The pages of ``make_pages()``, produced by a reader thread up to ``ahead`` (``AHEAD``) pages
    in advance (inline when the caller is inside a transaction, or for ``ahead`` 0).

    Setting ``stop`` (from any thread: a download whose client went away) or closing this generator
    ends the reader promptly: it checks ``stop`` while it waits to hand over a page and before each
    page query (``fetch``), a page query it is running is cancelled, and it closes its database
    connection on the way out. The caller waits for it (at most 5 s) only off the event loop; on the
    loop the reader ends by itself. A reader past its last query (it hands over the end or an error
    next) gets no cancel request."""
    ahead = AHEAD if ahead is None else ahead
    stop = _Halt(stop)  # ending this generator stops its reader, not the caller's download
    if connection.in_atomic_block or ahead < 1:
        for page in make_pages():
            if stop.is_set():
                raise Stopped("the download was stopped")
            yield page
        return
    pages: queue.Queue = queue.Queue(maxsize=ahead)
    held: list = []  # the reader's psycopg connection, for cancelling its query
    state = _ReaderState()  # whether the reader is inside fetch() (its stop check, then its page query)

    def put(item) -> bool:
        while not stop.is_set():
            try:
                pages.put(item, timeout=WAIT)
                return True
            except queue.Full:
                continue
        return False

    def work():
        _reader.stop, _reader.state = stop, state  # fetch() checks stop before each page query
        final = None  # the last item to hand over: _DONE, or the error (nothing when stopped)
        try:
            connection.ensure_connection()
            held.append(connection.connection)
            final = _DONE if _hand_over(iter(make_pages()), put, stop) else None
        except BaseException as exc:  # handed to the caller, raised there (unless it has stopped)
            final = exc
        finally:
            held.clear()  # no query is left to cancel
            connections.close_all()  # this thread's connections only
        if final is not None:
            put(final)

    reader = threading.Thread(target=work, name="export-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            item = _take(pages, stop)
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        _end(reader, held, state)


def _hand_over(pages, put, stop: _Halt) -> bool:
    """Hands each page of the generator ``pages`` over with ``put``; True at its end, False once
    stopped. ``stop`` is checked before the generator is asked for the next page (its query)."""
    while not stop.is_set():
        page = next(pages, _DONE)
        if page is _DONE:
            return True
        if not put(page):
            return False
    return False


class _Halt:
    """The reader's stop: set by the download's own ``stop`` (the client went away) or by the end of
    ``read_ahead`` (its pages are done, or its caller closed it). Setting it leaves the download's
    event alone: a generator that reads pages through ``read_ahead`` may have more to send after
    them (the Parquet footer), which a set download event would cut off (under ASGI the view closes
    a generator whose stop is set)."""

    def __init__(self, outer: threading.Event | None):
        self.outer, self.own = outer, threading.Event()

    def is_set(self) -> bool:
        return self.own.is_set() or (self.outer is not None and self.outer.is_set())

    def set(self) -> None:
        self.own.set()


class Stopped(Exception):
    """The download was stopped (its client went away) before it was complete."""


def _take(pages: queue.Queue, stop: _Halt):
    """The next item the reader handed over, waiting in steps of ``WAIT`` that check ``stop``."""
    while not stop.is_set():
        try:
            return pages.get(timeout=WAIT)
        except queue.Empty:
            continue
    raise Stopped("the download was stopped")


class _ReaderState:
    in_query = False


CANCEL_AGAIN = 0.25  # seconds: a cancel request that found the connection idle is sent again after this
CANCEL_FOR = 5.0  # seconds: how long a stopped reader's query is cancelled again while it has not ended


def _end(reader: threading.Thread, held: list, state: _ReaderState | None = None) -> None:
    """After ``stop`` is set: cancel the reader's query while the reader is inside ``fetch`` (``held`` is
    empty once the reader has run its last query), and wait for the reader (at most 5 s) unless this is
    the event loop's thread, which must never block (the reader ends by itself).

    The reader may have passed fetch's stop check just before the stop and not yet started its query:
    a cancel request then finds the connection idle and the server ignores it, and the query would run
    to its end (a 20 s page query did, in 2 of 4 runs of test_export_disconnect). So the cancel is sent
    again every ``CANCEL_AGAIN`` s while the reader is still inside fetch, for at most ``CANCEL_FOR`` s."""
    if not reader.is_alive():
        return
    on_loop = _on_event_loop()
    for conn in list(held):
        if on_loop:  # a cancel request opens a connection to the server: not on the loop
            threading.Thread(target=_cancel_while_in_query, args=(conn, state), name="export-cancel",
                             daemon=True).start()
        else:
            _cancel_while_in_query(conn, state)
    if not on_loop:
        reader.join(timeout=5)


def _cancel_while_in_query(conn, state: _ReaderState | None) -> None:
    """Cancel the reader's query, and again while it is still inside fetch (its query not yet begun when
    the first request came); once when the reader's state is not known."""
    end = time.monotonic() + CANCEL_FOR
    while True:
        if state is not None and not state.in_query:
            return
        _cancel(conn)
        if state is None:
            return
        again = time.monotonic() + CANCEL_AGAIN
        while state.in_query and time.monotonic() < again:
            time.sleep(0.01)
        if time.monotonic() >= end:
            return


def _cancel(conn) -> None:
    """Cancel what ``conn`` runs now (nothing when it is idle: the server ignores the request)."""
    try:
        conn.cancel_safe(timeout=5)
    except Exception:  # closed meanwhile, or the server unreachable: the reader ends after its query
        pass


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
