"""Reading an export's pages: keyset page queries on a binary psycopg cursor, read ahead by a thread.

``fetch(sql, params)`` runs one page query on a server-binding psycopg cursor in binary mode
(integers and floats are not parsed from text; ``array_send`` values arrive as bytes).
``read_ahead(pages)`` iterates a page generator in a thread of its own
(with its own database connection), a bounded number of pages ahead: Postgres computes the next
page while the caller encodes this one, so the two processes work at the same time. Inside a
transaction (tests, a caller's ``atomic`` block) the pages are read inline on the caller's
connection, the only one that sees its uncommitted rows.
"""
from __future__ import annotations

import queue
import threading

import psycopg
from django.db import connection, connections

AHEAD = 2  # pages (or record batches) a reader thread may hold ready: memory for a few pages
_DONE = object()


def fetch(sql: str, params) -> list[tuple]:
    """All rows of one page query, read in binary on the current thread's connection."""
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cur:
        cur.execute(sql, params, binary=True)
        return cur.fetchall()


def read_ahead(make_pages, ahead: int | None = None):
    """The pages of ``make_pages()``, produced by a reader thread up to ``ahead`` (``AHEAD``) pages
    in advance (inline when the caller is inside a transaction, or for ``ahead`` 0)."""
    ahead = AHEAD if ahead is None else ahead
    if connection.in_atomic_block or ahead < 1:
        yield from make_pages()
        return
    pages: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                pages.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def work():
        try:
            for page in make_pages():
                if not put(page):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the caller, raised there
            put(exc)
        finally:
            connections.close_all()  # this thread's connections only

    reader = threading.Thread(target=work, name="export-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            item = pages.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join(timeout=5)  # it stops within a page (it checks ``stop`` between pages)
