"""How many export downloads one server process streams at once, and the database connections they hold.

A download is slow (the client reads at its own pace) and reads its pages on a thread of its own
(apps/export/fetch.py: one pooled connection while it runs a page query). The server process has a
fixed pool of connections (``manage.py serve``: 16 for one process, fewer each for several), which
every request of that process shares. So:

- at most ``capacity()`` downloads stream at once in a process; one more is answered 429 with
  ``Retry-After`` (the view). Each holds at most two connections (its reader's, and briefly the
  request thread's for the rare rows Postgres formats), so they take at most half of the pool;
- ``Guarded`` hands the request's own connection back to the pool before the first chunk and after
  every chunk, and gives the slot back when the download ends, fails or is dropped, whichever way
  it ends (even when Django never closes the response: the slot is also freed when the download
  object is garbage collected).

``SELFPLAY_EXPORTS_PER_PROCESS`` sets the number (default: a quarter of the process's pool, at least
one; 4 where the connections are not pooled).
"""
from __future__ import annotations

import asyncio
import threading
import weakref

from django.conf import settings
from django.db import connection

RETRY_AFTER = 5  # seconds a refused download is told to wait (an export of a few thousand rows takes about that)
DEFAULT_UNPOOLED = 4
_lock = threading.Lock()
_running = 0


def capacity() -> int:
    """Downloads one process streams at once: SELFPLAY_EXPORTS_PER_PROCESS, else a quarter of its
    connection pool (at least 1), else 4."""
    from django.core.exceptions import ImproperlyConfigured

    from selfplay_web import config

    try:
        configured = config.env_int("SELFPLAY_EXPORTS_PER_PROCESS", 0, minimum=1)
    except config.SettingError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    if configured:
        return configured
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    size = pool.get("max_size") if isinstance(pool, dict) else None
    return max(1, int(size) // 4) if size else DEFAULT_UNPOOLED


class Ticket:
    """One download's slot; ``release()`` may be called any number of times, from any thread."""

    def __init__(self):
        self.held = True

    def release(self) -> None:
        global _running
        with _lock:
            if self.held:
                self.held = False
                _running -= 1


def take() -> Ticket | None:
    """A slot, or None when ``capacity()`` downloads are streaming in this process."""
    global _running
    limit = capacity()
    with _lock:
        if _running >= limit:
            return None
        _running += 1
        return Ticket()


def running() -> int:
    return _running


class Guarded:
    """The chunks of a download holding ``ticket``: the request's connection goes back to the pool around
    every chunk, and the slot is freed at the end, on an error, on ``close()`` or when this is collected."""

    def __init__(self, chunks, ticket: Ticket):
        self.chunks, self.ticket = chunks, ticket
        weakref.finalize(self, ticket.release)

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        release_connection()  # the one the request was served with, or the one the last chunk used
        try:
            return next(self.chunks)
        except BaseException:  # the end (StopIteration), an error, or the download was stopped
            self.close()
            raise
        finally:
            release_connection()

    def close(self) -> None:
        self.ticket.release()
        try:
            self.chunks.close()
        finally:
            release_connection()


def release_connection() -> None:
    """Give this thread's database connection back (to the pool, or close it): not inside a transaction
    (tests, a caller's ``atomic`` block: its rows are visible on that connection only), and never on the
    event loop's thread (no database call may run there; Django releases it when it closes the response)."""
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass
    if not connection.in_atomic_block:
        connection.close()
