"""Uploaded files are stored under generated names inside the upload folder and never served.

A corpus upload is kept as ``<MEDIA_ROOT>/corpora/<uuid4 hex><suffix>`` (apps/corpora/uploads.py)
whatever the uploader called it, until its ingest job has read it; the original name is only a
label. Benchmark files are named by a checked slug. No URL maps to MEDIA_ROOT, and the real ASGI
application's static handler (selfplay_web/asgi.py) does not walk out of the static folders to
the data directory (uploads, the generated SECRET_KEY file).
"""
from __future__ import annotations

import re
from pathlib import Path

import django_rq
import pytest
from asgiref.testing import ApplicationCommunicator
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from apps.corpora.models import Corpus, Ingest
from apps.corpora.parsing import IngestError
from apps.corpora.uploads import accept_file, upload_dir
from apps.evals import benchmarks
from selfplay_web.asgi import application

pytestmark = pytest.mark.django_db

GENERATED = re.compile(r"[0-9a-f]{32}\.(txt|md|jsonl)")
HOSTILE = ["../../../../tmp/evil.txt", "/etc/cron.d/evil.txt", "..\\..\\evil.txt", "a/b/../../../x.md",
           "notes.TXT", "x.jsonl"]


def _inside_upload_dir(stored: str) -> bool:
    path = Path(stored)
    return path.resolve().parent == upload_dir().resolve() and GENERATED.fullmatch(path.name) is not None


def test_a_stored_upload_gets_a_generated_name_whatever_it_was_called(rq_queues):
    corpus = Corpus.objects.create(name="upload-names")
    stored = []
    for name in HOSTILE:
        data = b'{"title": "t", "text": "some text"}\n' if name.endswith("jsonl") else b"some text\n"
        result = accept_file(corpus, name, data, enqueue=False)
        stored.append(result["stored"])
        assert _inside_upload_dir(result["stored"]), (name, result["stored"])
    assert len(set(stored)) == len(HOSTILE)
    for path in stored:
        Path(path).unlink()
    with pytest.raises(IngestError, match="unsupported file type"):
        accept_file(corpus, "shell.php", b"<?php ?>", enqueue=False)


def test_page_and_api_uploads_queue_a_generated_path(admin_user, rq_queues, django_capture_on_commit_callbacks):
    corpus = Corpus.objects.create(name="upload-routes")
    api = APIClient()
    api.force_authenticate(admin_user)
    with django_capture_on_commit_callbacks(execute=True):  # django-rq enqueues on commit
        response = api.post(f"/api/v1/corpora/{corpus.pk}/documents/",
                            {"file": SimpleUploadedFile("../../evil.txt", b"owls at night\n")}, format="multipart")
    assert response.status_code == 202, response.content
    assert "stored" not in response.json() and response.json()["job_id"]  # the server's path is not told
    page = Client()
    page.force_login(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        assert page.post(f"/corpora/{corpus.pk}/upload/",
                         {"file": SimpleUploadedFile("..%2F..%2Fevil.md", b"# owls\n")}).status_code == 302
    jobs = django_rq.get_queue("short").jobs
    assert len(jobs) == 2
    for job in jobs:  # each job runs one Ingest row, which names the stored file
        ingest = Ingest.objects.get(pk=job.args[0])
        assert _inside_upload_dir(ingest.path), ingest.path
        assert "/" not in ingest.name  # only the base name is kept, as a label
        Path(ingest.path).unlink()


def test_benchmark_files_are_named_by_a_checked_slug(researcher):
    for name in ("../evil", "a/b", "..", "x\n../y"):
        with pytest.raises(benchmarks.BenchmarkError, match="name must be"):
            benchmarks.upload(name, SimpleUploadedFile("b.jsonl", b'{"question": "q", "answer": "a"}\n'), user=researcher)


async def _asgi_get(path: str) -> tuple[int, dict]:
    """GET through the real ASGI application (as daphne passes a raw path, no ``..`` folding)."""
    scope = {"type": "http", "http_version": "1.1", "method": "GET", "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": b"", "headers": [(b"host", b"127.0.0.1")],
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000)}
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await communicator.receive_output(10)
    while (await communicator.receive_output(10)).get("more_body"):
        pass
    return start["status"], {k.lower(): v for k, v in start["headers"]}


@pytest.mark.asyncio
async def test_no_url_serves_the_data_directory():
    (upload_dir() / "probe.txt").write_text("private")
    try:
        for path in ("/media/corpora/probe.txt", "/uploads/corpora/probe.txt", "/corpora/probe.txt",
                     "/static/../uploads/corpora/probe.txt", "/static/%2e%2e/uploads/corpora/probe.txt",
                     "/static/..%2fuploads/corpora/probe.txt", "/static/../secret_key", "/static/%2e%2e/secret_key",
                     "/static//etc/passwd"):
            status, _ = await _asgi_get(path)
            # 302: the login page, for an anonymous visitor; 400: a path leaving the static folders
            assert status in (302, 400, 404), (path, status)
        status, headers = await _asgi_get("/static/vendor/htmx.min.js")
        assert status == 200 and headers[b"x-content-type-options"] == b"nosniff"
        # the same headers as every page (docs/SECURITY.md says so)
        assert headers[b"x-frame-options"] == b"DENY" and headers[b"referrer-policy"] == b"same-origin"
    finally:
        (upload_dir() / "probe.txt").unlink()
