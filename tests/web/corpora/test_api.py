"""The corpora REST API: permissions, create, upload (202 + job, then a real burst worker), bad input, search."""
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.corpora.models import Corpus, Document
from apps.corpora.uploads import upload_dir

from .conftest import make_zip
from tests.web.runs.conftest import roles  # noqa: F401  (a flush by an earlier transactional test drops the role groups)


def _upload(client, corpus, name, data):
    return client.post(f"/api/v1/corpora/{corpus.pk}/documents/", {"file": SimpleUploadedFile(name, data)})


def test_anonymous_gets_json_401_or_403(client, corpus):
    for method, url in [("get", "/api/v1/corpora/"), ("post", "/api/v1/corpora/"), ("get", f"/api/v1/corpora/{corpus.pk}/"),
                        ("post", f"/api/v1/corpora/{corpus.pk}/documents/"), ("get", f"/api/v1/corpora/{corpus.pk}/search/?q=x")]:
        response = getattr(client, method)(url)
        assert response.status_code in (401, 403), url
        assert "error" in response.json()


def test_only_admins_create_corpora_and_upload(client, researcher, corpus):
    client.force_login(researcher)
    assert client.get("/api/v1/corpora/").json()["results"][0]["name"] == "testcorpus"
    response = client.post("/api/v1/corpora/", {"name": "mine"}, content_type="application/json")
    assert response.status_code == 403 and "admin role" in response.json()["error"]
    response = client.post(f"/api/v1/corpora/{corpus.pk}/documents/", {"title": "t", "text": "x"}, content_type="application/json")
    assert response.status_code == 403 and not Document.objects.exists()


def test_admin_creates_a_corpus_and_names_are_unique(client, admin_user):
    client.force_login(admin_user)
    response = client.post("/api/v1/corpora/", {"name": "papers", "description": "mine"}, content_type="application/json")
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "papers" and body["embedding_dim"] == 384 and body["progress"]["documents_total"] == 0
    again = client.post("/api/v1/corpora/", {"name": "papers"}, content_type="application/json")
    assert again.status_code == 400 and "already exists" in again.json()["error"]
    bad = client.post("/api/v1/corpora/", {"name": ""}, content_type="application/json")
    assert bad.status_code == 400 and "name" in bad.json()["error"]


def test_an_embedder_of_another_dimension_is_refused(client, admin_user, tmp_path):
    """A real (tiny, random) 32-dimension sentence-transformers model in a local folder."""
    import shutil

    from transformers import BertConfig, BertModel

    from apps.corpora.embedder import resolve_path

    minilm = resolve_path("all-MiniLM-L6-v2")
    folder = tmp_path / "tiny-embedder"
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm / name, folder / name)
    client.force_login(admin_user)
    response = client.post("/api/v1/corpora/", {"name": "tiny", "embedder": str(folder)}, content_type="application/json")
    assert response.status_code == 400
    assert "makes 32-dimension vectors; the chunk table stores 384-dimension vectors" in response.json()["error"]
    missing = client.post("/api/v1/corpora/", {"name": "tiny", "embedder": "/nope/model"}, content_type="application/json")
    assert missing.status_code == 400 and "nothing is downloaded" in missing.json()["error"]
    assert not Corpus.objects.filter(name="tiny").exists()


def test_search_on_a_mismatched_corpus_is_a_clear_400(client, reader):
    odd = Corpus.objects.create(name="odd", embedding_dim=768)
    client.force_login(reader)
    response = client.get(f"/api/v1/corpora/{odd.pk}/search/?q=hello")
    assert response.status_code == 400 and "768-dimension" in response.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_upload_returns_202_and_a_real_worker_ingests_it(client, rq_queues, sample_files, roles):
    import django_rq
    from django.contrib.auth.models import Group, User

    admin = User.objects.create_user("ada", password="x")
    admin.groups.add(Group.objects.get(name="admin"))
    client.force_login(admin)
    corpus = Corpus.objects.create(name="live")
    archive = make_zip({n: d for n, d in sample_files.items()})
    response = _upload(client, corpus, "bundle.zip", archive)
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["job_id"] and body["progress"]["status"] == "queued"
    # SimpleWorker runs the job in this process: a forked work horse of a process that already ran torch
    # would hang on torch's thread pool (the real `rqworker` parent never imports torch, so it forks safely).
    from rq.worker import SimpleWorker

    assert django_rq.get_queue("cpu").count == 0  # an upload never waits behind a training run
    django_rq.get_worker("short", worker_class=SimpleWorker).work(burst=True)
    detail = client.get(f"/api/v1/corpora/{corpus.pk}/").json()
    assert detail["status"] == "ready" and detail["doc_count"] == 6
    assert detail["progress"]["documents_done"] == detail["progress"]["documents_total"] == 6
    job = django_rq.get_queue("short").fetch_job(body["job_id"])
    assert job.is_finished and "finished: 6 documents" in job.return_value()
    ingest = corpus.ingests.get()  # the Ingest row the job ran (claimed, beating, reaped like a run)
    assert ingest.status == "finished" and not Path(ingest.path).exists()  # the upload is gone once it ended
    results = client.get(f"/api/v1/corpora/{corpus.pk}/search/?q=wild+yeast+starter&k=2").json()["results"]
    assert set(results[0]) == {"document_id", "chunk_id", "title", "text", "score", "matched", "ranks"}
    assert results[0]["title"] == "Sourdough baking"


def test_a_json_document_is_ingested_at_once(client, admin_user, corpus):
    client.force_login(admin_user)
    response = client.post(f"/api/v1/corpora/{corpus.pk}/documents/", {"title": "Owls", "text": "Owls hunt at night."},
                           content_type="application/json")
    assert response.status_code == 201 and response.json()["documents"] == 1
    assert Document.objects.get(corpus=corpus).title == "Owls"
    empty = client.post(f"/api/v1/corpora/{corpus.pk}/documents/", {"title": "Owls", "text": " "}, content_type="application/json")
    assert empty.status_code == 400 and "text" in empty.json()["error"]
    neither = client.post(f"/api/v1/corpora/{corpus.pk}/documents/", {"foo": 1}, content_type="application/json")
    assert neither.status_code == 400 and "multipart `file`" in neither.json()["error"]


BAD = [
    ("empty.txt", b"", "empty"),
    ("junk.txt", bytes(range(256)) * 64, "binary"),
    ("latin.txt", "café crème".encode("latin-1"), "not valid UTF-8"),
    ("huge.txt", b"z" * (100 * 1024 * 1024), "line 1 is 104.9 MB long"),
    ("slides.pptx", b"PK\x03\x04", "unsupported file type (.pptx)"),
    ("broken.pdf", b"%PDF-1.7\n%garbage without objects", "corrupt or unreadable PDF"),
    ("bomb.zip", make_zip({"zeros.txt": b"\0" * (30 * 1024 * 1024)}), "zip bomb"),
    ("evil.zip", make_zip({"../evil.txt": b"hello"}), "unsafe path"),
]


@pytest.mark.parametrize("name,data,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_uploads_are_refused_with_the_reason_and_nothing_stored(client, admin_user, corpus, name, data, needle):
    client.force_login(admin_user)
    response = _upload(client, corpus, name, data)
    assert response.status_code == 400, response.content
    assert needle in response.json()["error"] and name in response.json()["error"]
    corpus.refresh_from_db()
    assert corpus.status == "empty" and not Document.objects.exists()
    assert not upload_dir().exists() or list(upload_dir().iterdir()) == []


def test_uploads_over_the_limit_are_refused(client, admin_user, corpus, settings):
    settings.UPLOAD_MAX_BYTES = 1024
    client.force_login(admin_user)
    response = _upload(client, corpus, "big.txt", b"word " * 1000)
    assert response.status_code == 400 and "upload limit is 0 MiB" in response.json()["error"]


@pytest.mark.parametrize("query,needle", [("q=&k=5", "Empty query"), ("q=x&k=0", "k must be from 1"),
                                          ("q=x&k=lots", "whole number"), ("q=x&mode=fuzzy", "mode must be one of")])
def test_bad_search_arguments_are_400(client, reader, corpus, query, needle):
    client.force_login(reader)
    response = client.get(f"/api/v1/corpora/{corpus.pk}/search/?{query}")
    assert response.status_code == 400 and needle in response.json()["error"]


def test_unknown_corpus_is_404_json(client, reader):
    client.force_login(reader)
    response = client.get("/api/v1/corpora/999999/search/?q=x")
    assert response.status_code == 404 and "error" in json.loads(response.content)


def test_the_openapi_schema_lists_the_corpora_routes(client, reader):
    client.force_login(reader)
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    assert {"/api/v1/corpora/", "/api/v1/corpora/{id}/documents/", "/api/v1/corpora/{id}/search/"} <= set(paths) or \
        {"/api/v1/corpora/", "/api/v1/corpora/{pk}/documents/", "/api/v1/corpora/{pk}/search/"} <= set(paths)
