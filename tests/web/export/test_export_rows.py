"""The export's Python encoders (apps/export/rows.py) against the reference Postgres builds
(apps/export/sql.py): byte for byte equal JSONL for every database kind, with odd stored values;
binary integer arrays parsed as Postgres holds them; and the read-ahead thread."""
from __future__ import annotations

import asyncio
import io
import json
import threading

import pyarrow.parquet as pq
import pytest
from django.db import connection

from apps.export import rows as export_rows, stream as export, views as export_view
from apps.export.fetch import fetch, read_ahead
from apps.export.sql import lines_sql
from apps.episodes.models import Attempt, Grade, Task
from tests.web.export.conftest import jsonl_view

DB_KINDS = ("tasks", "rubrics", "attempts", "grades", "verdicts")
NASTY = 'tab\there\nnew "q" \\ back é ü 😀 \u2028 \x01 \x1f </script>'


def reference_jsonl(run, kind: str) -> bytes:
    """The whole selection as Postgres builds it (the format before export_rows, kept as reference)."""
    p = export.plan(kind, run, export.parse_filters(kind, {}))
    if p.last_id is None:
        return b""
    qs, _ = export._aliased(p)
    sql, params = qs.query.sql_with_params()
    with connection.cursor() as cur:
        cur.execute(lines_sql(export.columns(kind), sql), params)
        return b"".join(line.encode() + b"\n" for _, line in cur.fetchall())


def exported(run, kind: str, fmt: str = "jsonl", **params) -> bytes:
    p = export.plan(kind, run, export.parse_filters(kind, params))
    return b"".join(export.stream(p, fmt))


def add_odd_rows(run):
    """Rows other code paths could write: strings needing escapes, floats Postgres and Python write
    differently, whole floats from 1e15 on, turns / passages of other shapes, NULL array elements."""
    task = Task.objects.create(run=run, key="odd", step=7, question=NASTY, answer="é", pass_rate=1e-5,
                               data={"iteration": "12", "x": [1, 2.50, {"k": None}]})
    values = [(1e15, [{"role": "user", "text": NASTY}, {"role": "assistant", "text": "}, {\"role\": \"x\""}]),
              (-0.0, [{"text": "only text"}, {"role": "r", "text": "t", "extra": 1}]),
              (1234567890123456.5, [{"role": 1.50, "text": {"a": [1, "b"]}}]),
              (0.1 + 0.2, [{"role": True, "text": None}]),
              (9.999999999999999e22, "not a list"),
              (2.5e-7, [])]
    for i, (reward, turns) in enumerate(values):
        passages = [{"document_id": "d", "chunk_id": "c", "title": NASTY, "text": "x", "score": s}
                    for s in (0.25, 3, 1e16, 1.0000000000000002, -7.5e-5, True, None)][: i + 2]
        if i == 3:
            passages.append({"document_id": 12345678901234567890, "score": 1e300})
        Attempt.objects.create(run=run, task=task, key=f"odd{i}", task_key="odd", role=NASTY[:5], step=7, text=NASTY,
                               reward=reward, turns=turns, passages=passages,
                               token_ids=[-2**31, 0, 2**31 - 1] if i % 2 else [], loss_mask=[0, 1, None][: i + 1],
                               data={"iteration": [1, "2", 3.5, -4, "007", 10**20][i]})
        Grade.objects.create(run=run, key=f"odd{i}", attempt_key=f"odd{i}", step=7, score=reward, judge_text=NASTY,
                             data={"n": i})


@pytest.mark.parametrize("kind", DB_KINDS)
def test_jsonl_equals_the_postgres_reference_byte_for_byte(filled_run, kind):
    add_odd_rows(filled_run)
    reference = reference_jsonl(filled_run, kind)
    assert reference and exported(filled_run, kind) == reference
    for line in reference.splitlines():
        json.loads(line)


def test_odd_rows_come_from_the_reference_and_parquet_holds_the_same_values(filled_run):
    add_odd_rows(filled_run)
    body = exported(filled_run, "attempts")
    rows = [json.loads(line) for line in body.splitlines()]
    odd = {r["key"]: r for r in rows if r["key"].startswith("odd")}
    assert odd["odd0"]["turns"][1]["text"] == '}, {"role": "x"' and odd["odd0"]["reward"] == 1e15
    assert b'"reward":1e+15' in body and b'"reward":0.0' in body  # Postgres' float text (-0.0 is whole)
    assert odd["odd2"]["turns"] == [{"role": "1.5", "text": '{"a": [1, "b"]}'}]  # jsonb's own text of non-strings
    assert odd["odd3"]["turns"] == [{"role": "true", "text": ""}]
    assert odd["odd1"]["token_ids"] == [-2**31, 0, 2**31 - 1] and odd["odd2"]["loss_mask"] == [0, 1, None]
    assert [odd[f"odd{i}"]["iteration"] for i in range(6)] == [1, 2, None, -4, None, None]  # "007": no number
    table = pq.read_table(io.BytesIO(exported(filled_run, "attempts", "parquet")))
    assert jsonl_view(table.to_pylist(), "attempts") == rows
    assert table.schema.equals(export.arrow_schema("attempts"))


def test_whole_pages_and_filters_match_the_reference(filled_run, monkeypatch):
    """Pages of 5 rows (keyset cursor), a resume cursor and a filter: still the reference lines."""
    add_odd_rows(filled_run)
    monkeypatch.setattr(export, "PAGE", 5)
    reference = reference_jsonl(filled_run, "attempts").splitlines(keepends=True)
    assert exported(filled_run, "attempts") == b"".join(reference)
    second = json.loads(reference[3])["id"]
    assert exported(filled_run, "attempts", after=second) == b"".join(reference[4:])
    odd_only = b"".join(line for line in reference if b'"step":7' in line)
    assert exported(filled_run, "attempts", step_min=7) == odd_only


@pytest.mark.parametrize("sql, expected", [
    ("ARRAY[1, -2, 2147483647, -2147483648]::int4[]", [1, -2, 2147483647, -2147483648]),
    ("ARRAY[]::int4[]", []),
    ("NULL::int4[]", []),
    ("ARRAY[1, 0, -1, 32767, -32768]::int2[]", [1, 0, -1, 32767, -32768]),
    ("ARRAY[9007199254740993, -5]::int8[]", [9007199254740993, -5]),
    ("ARRAY[1, NULL, 3]::int4[]", [1, None, 3]),
    ("'[3:4]={7,8}'::int4[]", [7, 8]),
])
def test_binary_integer_arrays_parse_as_stored(db, sql, expected):
    rows = fetch(f"SELECT array_send({sql}), array_send(ARRAY[5, 6]::int4[]), array_send(ARRAY[]::int4[]) "
                 "FROM generate_series(1, 3)", [])
    for column, want in ((0, expected), (1, [5, 6]), (2, [])):
        assert export_rows._ints([r[column] for r in rows]).to_pylist() == [want] * 3
    text = fetch(f"SELECT ({sql})::text", [])[0][0]
    assert json.loads(export_rows.ints_json(text)) == expected


def _readers() -> list:
    return [t for t in threading.enumerate() if t.name == "export-read-ahead"]


@pytest.mark.django_db(transaction=True)
def test_the_read_ahead_thread_gives_the_pages_of_the_inline_read(filled_run, monkeypatch):
    """Outside a transaction the pages are read by a thread with its own connection: the same
    bytes as the inline read (ahead 0); a consumer that stops early ends the thread."""
    from django.db import connections

    from apps.export import fetch as export_fetch

    assert not connection.in_atomic_block
    monkeypatch.setattr(export, "PAGE", 5)
    p = export.plan("attempts", filled_run, export.parse_filters("attempts", {}))
    monkeypatch.setattr(export_fetch, "AHEAD", 0)
    inline = b"".join(export.stream(p, "jsonl"))
    monkeypatch.setattr(export_fetch, "AHEAD", 2)
    chunks = export.stream(p, "jsonl")
    first = next(chunks)
    assert len(_readers()) == 1  # the pages come from the reader thread
    assert first + b"".join(chunks) == inline
    assert not _readers()
    pages = read_ahead(lambda: ([i] for i in range(100)), ahead=1)
    assert next(pages) == [0]
    pages.close()  # the client went away
    assert not _readers()
    table = pq.read_table(io.BytesIO(b"".join(export.stream(p, "parquet"))))
    assert jsonl_view(table.to_pylist(), "attempts") == [json.loads(line) for line in inline.splitlines()]
    connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_an_error_in_the_read_ahead_thread_reaches_the_caller():
    def pages():
        yield [1]
        raise RuntimeError("page query failed")

    got = read_ahead(pages, ahead=2)
    assert next(got) == [1]
    with pytest.raises(RuntimeError, match="page query failed"):
        next(got)


@pytest.mark.django_db(transaction=True)
def test_the_end_of_the_pages_leaves_the_download_running_and_parquet_whole(filled_run):
    """read_ahead ending stops its reader, not the download: under ASGI the view closes a generator
    whose stop is set, which cut every Parquet file after its row groups (no footer)."""
    stop = threading.Event()
    assert list(read_ahead(lambda: iter([[1], [2]]), ahead=1, stop=stop)) == [[1], [2]]
    assert not stop.is_set()
    p = export.plan("attempts", filled_run, export.parse_filters("attempts", {}))
    stop = threading.Event()
    chunks = export_view.Download(export.stream(p, "parquet", stop), stop)  # what the view gives daphne

    async def download():
        return b"".join([chunk async for chunk in chunks])

    body = asyncio.run(download())
    assert body[-4:] == b"PAR1" and pq.read_table(io.BytesIO(body)).num_rows == 24
