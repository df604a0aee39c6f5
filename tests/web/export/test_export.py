"""The streaming export: every kind round-trips through datasets and pyarrow with the right rows
and fields, filters, resuming, errors and permissions, and manage.py export."""
from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from apps.export.stream import KINDS, arrow_schema, columns
from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.review.models import ReviewItem
from tests.web.export.conftest import jsonl_view

@pytest.fixture
def run(filled_run):
    return filled_run


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def get(client, run, kind, fmt="jsonl", **params):
    response = client.get(f"/api/v1/runs/{run.pk}/export/{kind}.{fmt}", params)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def load_jsonl(body: bytes, tmp_path, name="x.jsonl"):
    import datasets

    path = tmp_path / name
    path.write_bytes(body)
    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))


EXPECTED = {"tasks": 6, "rubrics": 6, "attempts": 24, "grades": 6, "verdicts": 2, "config": 1,
            "pairs": 6 * 2}  # per task: 3 reasoner answers rewarded 1, 0, 0 -> 2 pairs; challenger alone -> none


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_round_trips_through_datasets_and_pyarrow(run, reader, tmp_path, kind):
    client = client_for(reader)  # any logged-in user may export
    response, body = get(client, run, kind)
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    ds = load_jsonl(body, tmp_path)
    assert ds.num_rows == EXPECTED[kind] and ds.column_names == [c for c, _ in columns(kind)]
    response, body = get(client, run, kind, "parquet")
    assert response.status_code == 200 and response["Content-Type"] == "application/vnd.apache.parquet"
    table = pq.read_table(io.BytesIO(body))
    assert table.num_rows == EXPECTED[kind] and table.schema.equals(arrow_schema(kind))
    assert jsonl_view(table.to_pylist(), kind) == [json.loads(line) for line in get(client, run, kind)[1].splitlines()]


def test_attempt_rows_carry_turns_passages_and_token_masks(run, reader, tmp_path):
    _, body = get(client_for(reader), run, "attempts", role="reasoner", step_min=2, step_max=2)
    rows = list(load_jsonl(body, tmp_path))
    assert len(rows) == 6 and {r["step"] for r in rows} == {2}
    row = next(r for r in rows if r["key"] == "2:0:r1")
    assert row["turns"] == [{"role": "assistant", "text": "<search>q1</search>"},
                            {"role": "tool", "text": "<information>x</information>"}]
    assert row["passages"] == [{"document_id": "d1", "chunk_id": "c1", "title": "T", "text": "p", "score": 1.0}]
    assert row["token_ids"] == [0, 1] and row["loss_mask"] == [1, 1]
    assert row["reward"] == 0.0 and row["data"] == {"boxed": "1"}  # an object: datasets reads its keys as columns
    assert row["task_id"] == Task.objects.get(run=run, key="2:0").pk and row["task_valid"] is True
    assert row["iteration"] is None


def test_jsonl_data_is_an_object_that_datasets_reads_as_columns(run, reader, tmp_path):
    _, body = get(client_for(reader), run, "tasks")
    assert b'"data":{"' in body and b'"data":"' not in body  # not a string holding JSON
    ds = load_jsonl(body, tmp_path)
    assert set(ds.features["data"]) == {"answer_type", "iteration"}
    assert {r["data"]["answer_type"] for r in ds} == {"integer"}


def test_pairs_prefer_the_higher_reward(run, reader):
    _, body = get(client_for(reader), run, "pairs", step_min=1, step_max=1)
    rows = [json.loads(line) for line in body.splitlines()]
    assert len(rows) == 4 and {r["role"] for r in rows} == {"reasoner"}
    for r in rows:
        assert r["chosen_reward"] > r["rejected_reward"] and r["chosen"] == "answer 0"
        assert r["prompt"] == Task.objects.get(pk=r["task_id"]).question
    assert sorted(r["rejected_key"] for r in rows if r["task_key"] == "1:0") == ["1:0:r1", "1:0:r2"]


@pytest.mark.parametrize("kind, params, expected", [
    ("tasks", {"valid": "true"}, 3),
    ("tasks", {"valid": "false", "step_min": 2}, 2),
    ("tasks", {"review": "flagged"}, 1),
    ("tasks", {"review": "none"}, 4),
    ("tasks", {"iteration_min": 1, "iteration_max": 1}, 4),  # steps 2 and 3 record iteration 1
    ("attempts", {"role": "challenger"}, 6),
    ("attempts", {"review": "approved"}, 4),  # task 2:0's challenger attempt and 3 answers
    ("attempts", {"valid": "false"}, 12),
    ("rubrics", {"review": "pending"}, 1),
    ("grades", {"step_max": 1}, 2),
    ("verdicts", {"review": "flagged"}, 1),
    ("pairs", {"valid": "true"}, 6),
    ("pairs", {"role": "challenger"}, 0),
])
def test_filters(run, reader, kind, params, expected):
    response, body = get(client_for(reader), run, kind, **params)
    assert response.status_code == 200
    assert len(body.splitlines()) == expected


def test_review_status_columns(run, reader):
    _, body = get(client_for(reader), run, "tasks")
    status = {r["key"]: r["review_status"] for r in map(json.loads, body.splitlines())}
    assert status["1:0"] == "flagged" and status["2:0"] == "approved" and status["3:0"] == ""
    _, body = get(client_for(reader), run, "rubrics")
    assert {r["key"]: r["review_status"] for r in map(json.loads, body.splitlines())}["3:1:k"] == "pending"


def test_resume_with_after_and_limit(run, reader):
    client = client_for(reader)
    ids = list(Attempt.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    response, body = get(client, run, "attempts", limit=10)
    first = [json.loads(line)["id"] for line in body.splitlines()]
    assert first == ids[:10]
    assert response["X-Export-Last-Id"] == str(ids[9]) and response["X-Export-Has-More"] == "true"
    assert response["X-Export-Cursor-Field"] == "id"
    response, body = get(client, run, "attempts", after=response["X-Export-Last-Id"])
    assert [json.loads(line)["id"] for line in body.splitlines()] == ids[10:]
    assert response["X-Export-Has-More"] == "false" and response["X-Export-Last-Id"] == str(ids[-1])
    # parquet in parts
    response, body = get(client, run, "attempts", "parquet", after=ids[-4])
    assert pq.read_table(io.BytesIO(body)).column("id").to_pylist() == ids[-3:]
    response, body = get(client, run, "pairs", limit=1)
    assert response["X-Export-Cursor-Field"] == "task_id"
    assert {json.loads(line)["task_id"] for line in body.splitlines()} == {int(response["X-Export-Last-Id"])}


def test_an_empty_selection_is_an_empty_file(run, reader):
    response, body = get(client_for(reader), run, "tasks", step_min=99)
    assert response.status_code == 200 and body == b"" and response["X-Export-Last-Id"] == ""
    response, body = get(client_for(reader), run, "tasks", "parquet", step_min=99)
    assert pq.read_table(io.BytesIO(body)).num_rows == 0


@pytest.mark.parametrize("kind, params, message", [
    ("tasks", {"step_min": "abc"}, "step_min must be an integer, got 'abc'"),
    ("tasks", {"valid": "maybe"}, "valid must be true or false"),
    ("tasks", {"review": "liked"}, "review must be one of approved, flagged, pending, none"),
    ("rubrics", {"role": "solver"}, "filter 'role' does not apply to rubrics"),
    ("config", {"step_min": 1}, "does not apply to config"),
    ("tasks", {"colour": "red"}, "unknown filter 'colour'"),
    ("tasks", {"step_min": 5, "step_max": 2}, "step_min (5) is larger than step_max (2)"),
    ("tasks", {"limit": 0}, "limit must be at least 1"),
    ("widgets", {}, "unknown export kind 'widgets'"),
    ("verdicts", {"review": "pending"}, "verdicts holds reviewed items only"),
    ("verdicts", {"review": "none"}, "verdicts holds reviewed items only"),
])
def test_a_bad_filter_is_a_400_with_a_message(run, reader, kind, params, message):
    response, body = get(client_for(reader), run, kind, **params)
    assert response.status_code == 400
    assert message in json.loads(body)["error"]


def test_a_bad_format_or_run(run, reader):
    response, body = get(client_for(reader), run, "tasks", "csv")
    assert response.status_code == 400 and "jsonl or .parquet" in json.loads(body)["error"]
    response = client_for(reader).get("/api/v1/runs/999999/export/tasks.jsonl")
    assert response.status_code == 404


def test_anonymous_users_cannot_export(run):
    response = APIClient().get(f"/api/v1/runs/{run.pk}/export/tasks.jsonl")
    assert response.status_code in (401, 403)
    assert "Authentication required" in response.json()["error"]


def test_the_export_command_writes_the_same_stream(run, tmp_path, capsys):
    out = tmp_path / "grades.parquet"
    call_command("export", str(run.pk), "--kind", "grades", "--format", "parquet", "-o", str(out))
    assert pq.read_table(out).num_rows == Grade.objects.filter(run=run).count()
    out = tmp_path / "r.jsonl"
    call_command("export", str(run.pk), "--kind", "rubrics", "-o", str(out), "--step-min", "3")
    assert len(out.read_text().splitlines()) == Rubric.objects.filter(run=run, step__gte=3).count()
    with pytest.raises(CommandError, match="does not apply to rubrics"):
        call_command("export", str(run.pk), "--kind", "rubrics", "-o", str(out), "--role", "x")
    with pytest.raises(CommandError, match="no run 999999"):
        call_command("export", "999999", "--kind", "tasks", "-o", str(out))


def test_the_export_command_takes_the_format_from_the_file_name_and_refuses_bad_paths(run, tmp_path):
    out = tmp_path / "grades.parquet"  # no --format: the name says Parquet
    call_command("export", str(run.pk), "--kind", "grades", "-o", str(out))
    assert pq.read_table(out).num_rows == Grade.objects.filter(run=run).count()
    with pytest.raises(CommandError, match="is a folder: give a file name"):
        call_command("export", str(run.pk), "--kind", "grades", "-o", str(tmp_path))
    with pytest.raises(CommandError, match="the folder .*nowhere does not exist"):
        call_command("export", str(run.pk), "--kind", "grades", "-o", str(tmp_path / "nowhere" / "g.jsonl"))
    with pytest.raises(CommandError, match="names a parquet file but --format is jsonl"):
        call_command("export", str(run.pk), "--kind", "grades", "--format", "jsonl", "-o", str(out))
    assert pq.read_table(out).num_rows == Grade.objects.filter(run=run).count()  # the refused call wrote nothing
    with pytest.raises(CommandError, match="cannot write /dev/full: No space left on device"):  # a full disk
        call_command("export", str(run.pk), "--kind", "grades", "-o", "/dev/full")
    # a failed export leaves an earlier file at the path whole (written beside it, then renamed)
    before = out.read_bytes()
    with pytest.raises(CommandError, match="does not apply to grades"):
        call_command("export", str(run.pk), "--kind", "grades", "-o", str(out), "--role", "x")
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["grades.parquet"]


def test_the_schema_documents_the_export(reader):
    response = client_for(reader).get("/api/v1/schema/?format=json")
    paths = response.json()["paths"]
    route = next(v for k, v in paths.items() if "export" in k)
    op = route["get"]
    assert op["operationId"] == "runs_export"
    assert {p["name"] for p in op["parameters"]} >= {"role", "step_min", "step_max", "review", "valid", "after", "limit"}
    assert "application/x-ndjson" in op["responses"]["200"]["content"]
    assert "X-Export-Last-Id" in op["description"]
    for path in ("/api/v1/evals/", "/api/v1/evals/benchmarks/", "/api/v1/evals/compare/",
                 "/api/v1/runs/{run_id}/crossplay/"):
        assert path in paths, path


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_export_streams_page_by_page(filled_run, reader, monkeypatch):
    """Under ASGI the body is an async iterator fed one page at a time (a sync iterator would be
    collected into one list by Django before sending)."""
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient
    from rest_framework.authtoken.models import Token

    from apps.export import stream as export

    monkeypatch.setattr(export, "PAGE", 5)
    token = await sync_to_async(lambda: Token.objects.create(user=reader).key)()
    response = await AsyncClient().get(f"/api/v1/runs/{filled_run.pk}/export/attempts.jsonl",
                                       headers={"Authorization": f"Token {token}"})
    assert response.status_code == 200 and response.is_async
    chunks = [chunk async for chunk in response.streaming_content]
    assert len(chunks) == 5  # 24 rows in pages of 5
    lines = b"".join(chunks).splitlines()
    assert len(lines) == 24 and json.loads(lines[-1])["id"] == int(response["X-Export-Last-Id"])
    from django.db import connections

    await sync_to_async(lambda: connections.close_all())()  # the pages' thread's connection, as a server would


def test_odd_stored_values_keep_one_type_per_column_in_both_formats(run, reader, tmp_path):
    """Rows written by other code paths: non-finite and whole-number floats, turns and passages of
    any shape, a non-integer iteration. JSONL (built by Postgres) and Parquet (built in Python)
    agree, and datasets reads the JSONL."""
    Attempt.objects.filter(run=run).delete()
    odd = [
        dict(reward=float("nan"), turns=[{"role": "assistant", "text": "a", "extra": 1}, "junk", {"text": 5}],
             passages=[{"document_id": 7, "score": 2}, {"title": "t", "score": "high"}, 3], data={"iteration": "x"}),
        dict(reward=float("inf"), turns={"not": "a list"}, passages={"x": 1}, data={"iteration": 2}),
        dict(reward=2.0, turns=[], passages=[{"document_id": "d", "chunk_id": "c", "title": "T", "text": "x",
                                              "score": 0.25}], data={"iteration": 1.5}),
        dict(reward=None, turns=[{"role": None, "text": "tab\tnewline\n\"quote\" \\ é"}], passages=[], data={}),
    ]
    for i, fields in enumerate(odd):
        Attempt.objects.create(run=run, key=f"odd{i}", role="solver", step=9, token_ids=[1, i], loss_mask=[0, 1],
                               **fields)
    client = client_for(reader)
    _, body = get(client, run, "attempts")
    from_jsonl = [json.loads(line) for line in body.splitlines()]
    _, parquet = get(client, run, "attempts", "parquet")
    assert jsonl_view(pq.read_table(io.BytesIO(parquet)).to_pylist(), "attempts") == from_jsonl
    assert [r["reward"] for r in from_jsonl] == [None, None, 2.0, None]
    assert b'"reward":2.0' in body  # a float stays a float literal
    assert from_jsonl[0]["turns"] == [{"role": "assistant", "text": "a"}, {"role": "", "text": "5"}]
    assert from_jsonl[0]["passages"] == [
        {"document_id": "7", "chunk_id": "", "title": "", "text": "", "score": 2.0},
        {"document_id": "", "chunk_id": "", "title": "t", "text": "", "score": None}]
    assert from_jsonl[1]["turns"] == [] and from_jsonl[1]["passages"] == []
    assert [r["iteration"] for r in from_jsonl] == [None, 2, None, None]
    assert from_jsonl[3]["turns"][0]["text"] == "tab\tnewline\n\"quote\" \\ é"
    assert load_jsonl(body, tmp_path).num_rows == 4


def test_verdicts_hold_verdicts_only(run, reader):
    _, body = get(client_for(reader), run, "verdicts")
    rows = [json.loads(line) for line in body.splitlines()]
    assert sorted((r["key"], r["status"]) for r in rows) == [("1:0", "flagged"), ("2:0", "approved")]  # not 3:1:k


def test_an_empty_export_says_why(run, reader, researcher):
    from apps.runs.models import Run

    response, body = get(client_for(reader), run, "tasks", step_min=99)
    assert body == b"" and response["X-Export-Empty"] == "No row matches these filters; the same export without filters has rows."
    fresh = Run.objects.create(method="spice", model_name="tiny", owner=researcher, status="running", total_steps=3,
                               config={"method": "spice"})
    ReviewItem.objects.create(run=fresh, run_number=fresh.pk, kind="task", key="1:0", task_key="1:0")
    response, body = get(client_for(reader), fresh, "verdicts")
    assert body == b"" and response["X-Export-Empty"].startswith("Nobody has reviewed this run yet: 1 item waits")
    response, _ = get(client_for(reader), fresh, "tasks")
    assert response["X-Export-Empty"].startswith("The run has not finished its first step yet")
    response, body = get(client_for(reader), run, "tasks")
    assert "X-Export-Empty" not in response and len(body.splitlines()) == run.tasks.count() > 0
    from apps.export.templatetags.export_tags import export_panel
    rows = {d["kind"]: d for d in export_panel(fresh)["downloads"]}
    assert rows["verdicts"]["rows"] == 0 and rows["verdicts"]["empty"].startswith("Nobody has reviewed this run yet")
