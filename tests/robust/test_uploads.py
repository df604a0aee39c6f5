"""Malformed uploads through both doors (the REST API and the corpus page's form): each one is
refused with a 4xx that names the file and the problem, no traceback, nothing stored, nothing
queued, and the documents already in the corpus are all still there and still searchable.

Files that pass the upload check but fail in the ingest job, the good lines of a partly broken
JSONL, HTTP-level garbage (wrong content types, broken bodies, wrong JSON types) and a filename
with path traversal are tested below the table.
"""
from __future__ import annotations

import html
import json
import re

import django_rq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.corpora.jobs import ingest_upload
from apps.corpora.models import Corpus, Document
from apps.corpora.uploads import upload_dir

from .conftest import KEPT, assert_still_searchable, snapshot
from .files import GOOD_TEXT, MALFORMED, make_zip

pytestmark = pytest.mark.django_db


def api_upload(client, corpus, name, data):
    response = client.post(f"/api/v1/corpora/{corpus.pk}/documents/", {"file": SimpleUploadedFile(name, data)})
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    return response.status_code, response.json().get("error", "")


def form_upload(client, corpus, name, data):
    response = client.post(f"/corpora/{corpus.pk}/upload/", {"file": SimpleUploadedFile(name, data)})
    errors = re.findall(r'<ul class="errorlist"[^>]*>(.*?)</ul>', response.content.decode(), re.DOTALL)
    return response.status_code, html.unescape(" ".join(errors))


DOORS = {"api": api_upload, "form": form_upload}


def nothing_stored_or_queued() -> None:
    assert not upload_dir().exists() or list(upload_dir().iterdir()) == []
    assert django_rq.get_queue("cpu").count == 0


def test_the_table_holds_at_least_30_distinct_malformed_files():
    assert len(MALFORMED) >= 30 and len({name for name, _, _ in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("name,data,needle", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_upload_is_refused_and_nothing_is_lost(client, admin_user, kept_corpus, door, name, data, needle):
    client.force_login(admin_user)
    before = snapshot(kept_corpus)
    status, error = DOORS[door](client, kept_corpus, name, data)
    assert status == 400, (status, error[:300])
    assert needle in error and name in error, error[:500]
    assert "Traceback" not in error
    assert snapshot(kept_corpus) == before
    kept_corpus.refresh_from_db()
    assert kept_corpus.status == Corpus.Status.READY and kept_corpus.errors == []
    nothing_stored_or_queued()
    assert_still_searchable(kept_corpus)


def test_an_upload_over_the_size_limit_is_refused_by_both_doors(client, admin_user, kept_corpus, settings):
    settings.UPLOAD_MAX_BYTES = 1024 * 1024
    client.force_login(admin_user)
    before = snapshot(kept_corpus)
    big = (GOOD_TEXT + b"\n") * 20_000  # 1.5 MB of fine text
    for door in DOORS.values():
        status, error = door(client, kept_corpus, "big.txt", big)
        assert status == 400 and "the upload limit is 1 MiB" in error and "Split it" in error, error[:300]
    assert snapshot(kept_corpus) == before
    nothing_stored_or_queued()


# ---------------------------------------------------------------- accepted, then judged by the ingest job

JOB_FAILURES = [
    ("all-bad-members.zip", make_zip({"a.txt": b"\xff\xfe\xfa bad", "b.html": b"<script>x()</script>"}),
     "no usable file in the zip"),
    ("scanned.pdf", None, "no extractable text"),
]


@pytest.mark.parametrize("name,data,needle", JOB_FAILURES, ids=[j[0] for j in JOB_FAILURES])
def test_a_file_the_job_cannot_use_fails_cleanly_and_keeps_the_corpus(client, admin_user, kept_corpus, name, data,
                                                                     needle):
    """The upload check is cheap (a zip's members and a PDF's text are read by the job): the job then
    records the reason on the corpus, deletes the stored file, and the stored documents stay."""
    if data is None:
        from .files import blank_page_pdf

        data = blank_page_pdf()
    client.force_login(admin_user)
    before = snapshot(kept_corpus)
    status, _ = api_upload(client, kept_corpus, name, data)
    assert status == 202
    (stored,) = upload_dir().iterdir()
    result = ingest_upload(kept_corpus.pk, str(stored), name)
    assert needle in result["error"] and name in result["error"]
    kept_corpus.refresh_from_db()
    assert any(needle in e for e in kept_corpus.errors)
    assert snapshot(kept_corpus) == before
    assert not stored.exists()
    assert_still_searchable(kept_corpus)
    detail = client.get(f"/api/v1/corpora/{kept_corpus.pk}/").json()
    assert any(needle in e for e in detail["progress"]["errors"])


def test_a_partly_broken_jsonl_keeps_the_good_lines_and_reports_the_bad_ones(client, admin_user, kept_corpus):
    rows = [json.dumps({"title": "Basalt columns", "text": "Basalt cools into hexagonal columns at the Giant's Causeway."}),
            "{broken",
            json.dumps({"title": "No text"}),
            json.dumps({"title": "Mangroves", "text": "Mangrove roots trap silt and shelter young fish in tidal swamps."}),
            json.dumps(["not", "an", "object"])]
    client.force_login(admin_user)
    response = client.post(f"/api/v1/corpora/{kept_corpus.pk}/documents/",
                           {"file": SimpleUploadedFile("mixed.jsonl", "\n".join(rows).encode())})
    assert response.status_code == 202
    warnings = response.json()["warnings"]  # told at upload time, before the job runs
    assert [w.split(":")[0] for w in warnings] == ["mixed.jsonl line 2", "mixed.jsonl line 3", "mixed.jsonl line 5"]
    (stored,) = upload_dir().iterdir()
    result = ingest_upload(kept_corpus.pk, str(stored), "mixed.jsonl")
    assert result["documents"] == 2 and len(result["errors"]) == 3
    kept_corpus.refresh_from_db()
    assert kept_corpus.status == Corpus.Status.READY and kept_corpus.doc_count == 4
    assert [e.split(":")[0] for e in kept_corpus.errors] == ["mixed.jsonl line 2", "mixed.jsonl line 3",
                                                             "mixed.jsonl line 5"]
    assert set(kept_corpus.documents.values_list("title", flat=True)) == {t for t, _ in KEPT} | {"Basalt columns",
                                                                                                  "Mangroves"}
    assert_still_searchable(kept_corpus)


def test_a_zip_member_that_cannot_be_unpacked_is_reported_and_the_rest_kept(client, admin_user, kept_corpus):
    from .files import damaged_member_zip

    client.force_login(admin_user)
    status, _ = api_upload(client, kept_corpus, "mixed.zip", damaged_member_zip())
    assert status == 202  # the upload check reads the directory only
    (stored,) = upload_dir().iterdir()
    result = ingest_upload(kept_corpus.pk, str(stored), "mixed.zip")
    assert result["documents"] == 1
    assert any(e.startswith("mixed.zip/damaged.txt: could not unpack") for e in result["errors"]), result["errors"]
    kept_corpus.refresh_from_db()
    assert kept_corpus.status == Corpus.Status.READY and kept_corpus.doc_count == 3
    assert any("damaged.txt: could not unpack" in e for e in kept_corpus.errors)
    assert_still_searchable(kept_corpus)


def test_the_form_shows_the_broken_lines_of_an_accepted_jsonl(client, admin_user, kept_corpus):
    data = b'{"title": "Ok", "text": "Fine text about moss."}\n{oops\n'
    client.force_login(admin_user)
    response = client.post(f"/corpora/{kept_corpus.pk}/upload/", {"file": SimpleUploadedFile("part.jsonl", data)},
                           follow=True)
    page = html.unescape(response.content.decode())
    assert response.status_code == 200 and "part.jsonl accepted" in page
    assert "part.jsonl line 2: not valid JSON" in page


def test_a_filename_with_path_traversal_is_stored_under_a_generated_name(client, admin_user, kept_corpus, tmp_path):
    """The client's filename never chooses a path: Django keeps its last component, we store under a uuid."""
    client.force_login(admin_user)
    upload = SimpleUploadedFile("../../../../tmp/evil.txt", GOOD_TEXT)
    response = client.post(f"/api/v1/corpora/{kept_corpus.pk}/documents/", {"file": upload})
    assert response.status_code == 202
    (stored,) = upload_dir().iterdir()
    assert stored.parent == upload_dir() and stored.suffix == ".txt" and "evil" not in stored.name
    assert not (tmp_path.parent / "evil.txt").exists()
    ingest_upload(kept_corpus.pk, str(stored), "evil.txt")
    doc = Document.objects.get(corpus=kept_corpus, title="evil")
    assert ".." not in doc.source and "/" not in doc.source


# ---------------------------------------------------------------- HTTP-level garbage

URL = "/api/v1/corpora/{pk}/documents/"


@pytest.mark.parametrize("body,content_type,status,needle", [
    (b"just some words", "text/plain", 415, "Unsupported media type"),
    (b"<xml/>", "application/xml", 415, "Unsupported media type"),
    (b"{not json", "application/json", 400, "JSON parse error"),
    (b"5", "application/json", 400, "JSON object"),
    (b'"a string"', "application/json", 400, "JSON object"),
    (b"[1, 2]", "application/json", 400, "JSON object"),
    (b"null", "application/json", 400, "JSON object"),
    (b'{"title": 5, "text": "words"}', "application/json", 400, "title"),
    (b'{"title": "t", "text": ["a", "b"]}', "application/json", 400, "text"),
    (b'{"title": "t", "text": null}', "application/json", 400, "text"),
    (b'{"title": "' + b"t" * 600 + b'", "text": "x"}', "application/json", 400, "title"),
    (b'{"upload": "wrong field"}', "application/json", 400, "multipart `file`"),
    (b"--xx\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nabc",
     "multipart/form-data; boundary=xx", 400, "file"),
    (b"anything", "multipart/form-data", 400, "boundary"),
], ids=lambda v: v if isinstance(v, int) else None)
def test_bodies_of_the_wrong_shape_are_clear_4xx(client, admin_user, kept_corpus, body, content_type, status, needle):
    client.force_login(admin_user)
    before = snapshot(kept_corpus)
    response = client.generic("POST", URL.format(pk=kept_corpus.pk), body, content_type=content_type)
    assert response.status_code == status, response.content[:300]
    assert needle in response.json()["error"], response.json()
    assert snapshot(kept_corpus) == before
    nothing_stored_or_queued()


def test_a_json_body_over_the_request_limit_is_413(client, admin_user, kept_corpus, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    client.force_login(admin_user)
    body = json.dumps({"title": "big", "text": "word " * 20_000})
    response = client.post(URL.format(pk=kept_corpus.pk), body, content_type="application/json")
    assert response.status_code == 413 and "upload big documents as a file" in response.json()["error"]
    assert len(snapshot(kept_corpus)[0]) == 2


@pytest.mark.parametrize("body", [b"[]", b"7", b'"name"', b'{"name": ["a"]}', b'{"name": "x", "chunk_tokens": "many"}',
                                  b'{"name": "x", "chunk_tokens": [1]}', b'{"name": {"a": 1}}'])
def test_creating_a_corpus_from_a_body_of_the_wrong_shape_is_400(client, admin_user, kept_corpus, body):
    client.force_login(admin_user)
    response = client.post("/api/v1/corpora/", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]
    assert not Corpus.objects.exclude(name="kept").exists()


def test_the_form_without_a_file_says_so(client, admin_user, kept_corpus):
    client.force_login(admin_user)
    response = client.post(f"/corpora/{kept_corpus.pk}/upload/", {"title": "no file"})
    assert response.status_code == 400 and "This field is required" in response.content.decode()
    assert len(snapshot(kept_corpus)[0]) == 2


def test_manage_py_ingest_refuses_every_malformed_file_and_keeps_the_corpus(kept_corpus, tmp_path):
    """The command line door (``manage.py ingest CORPUS PATH...``): each file refused with its reason."""
    import io

    from django.core.management import CommandError, call_command

    paths = []
    for i, (name, data, _) in enumerate(MALFORMED):
        (tmp_path / str(i)).mkdir()
        path = tmp_path / str(i) / name
        path.write_bytes(data)
        paths.append(str(path))
    before = snapshot(kept_corpus)
    err = io.StringIO()
    with pytest.raises(CommandError, match=f"{len(MALFORMED)} file\\(s\\) refused"):
        call_command("ingest", "kept", *paths, stdout=io.StringIO(), stderr=err)
    lines = err.getvalue().splitlines()
    for (name, _, needle) in MALFORMED:
        assert any(line.startswith(f"refused: {name}: ") and needle in line for line in lines), name
    assert snapshot(kept_corpus) == before
    assert_still_searchable(kept_corpus)


def test_overfull_request_bodies_get_a_json_error(client, admin_user, kept_corpus, settings):
    """Django refuses these while the body is parsed; the API still answers in its JSON error shape."""
    client.force_login(admin_user)
    url = URL.format(pk=kept_corpus.pk)
    files = {f"f{i}": SimpleUploadedFile(f"a{i}.txt", GOOD_TEXT) for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FILES + 1)}
    response = client.post(url, files)
    assert response.status_code == 400 and "Too many files in one request" in response.json()["error"]
    response = client.post(url, {f"k{i}": "v" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)})
    assert response.status_code == 400 and "Too many form fields" in response.json()["error"]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2**20
    response = client.post("/api/v1/runs/", json.dumps({"method": "spice", "model": "x" * 2**21}),
                           content_type="application/json")
    assert response.status_code == 413 and "over 1 MiB" in response.json()["error"]
    assert snapshot(kept_corpus)[0] == sorted(kept_corpus.documents.values_list("id", flat=True))
    nothing_stored_or_queued()
