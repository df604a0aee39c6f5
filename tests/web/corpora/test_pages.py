"""Corpora pages: list, detail with progress bar and htmx search, create and upload forms (admin only)."""
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.corpora.ingest import ingest_documents
from apps.corpora.models import Corpus, Document
from apps.corpora.parsing import ParsedDoc

from .conftest import DOCS


def test_the_list_shows_corpora_with_counts_and_status(client, reader, corpus):
    Corpus.objects.filter(pk=corpus.pk).update(doc_count=12, chunk_count=34, status="ready")
    client.force_login(reader)
    page = client.get("/corpora/").content.decode()
    assert "testcorpus" in page and ">12<" in page and ">34<" in page and "ready" in page
    assert "New corpus" not in page  # readers cannot create


def test_an_admin_creates_a_corpus_from_the_list(client, admin_user):
    client.force_login(admin_user)
    assert "New corpus" in client.get("/corpora/").content.decode()
    response = client.post("/corpora/new/", {"name": "notes", "description": "d"})
    corpus = Corpus.objects.get(name="notes")
    assert response.status_code == 302 and response["Location"] == f"/corpora/{corpus.pk}/"
    again = client.post("/corpora/new/", {"name": "notes"})
    assert again.status_code == 400 and "already exists" in again.content.decode()


def test_detail_shows_documents_progress_and_searches_through_htmx(client, reader, corpus):
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    corpus.begin_ingest(10)
    client.force_login(reader)
    page = client.get(f"/corpora/{corpus.pk}/").content.decode()
    assert "Sourdough baking" in page and 'role="progressbar"' in page and 'hx-trigger="every 1s"' in page
    assert 'hx-get="/corpora/%d/search/"' % corpus.pk in page and "Upload" not in page
    partial = client.get(f"/corpora/{corpus.pk}/progress/").content.decode()
    assert "3 / 10 documents" in partial or "0 / 10 documents" in partial
    corpus.finish_ingest()
    partial = client.get(f"/corpora/{corpus.pk}/progress/").content.decode()
    assert "every 1s" not in partial and f"{corpus.doc_count} documents stored · " in partial  # polling stops
    results = client.get(f"/corpora/{corpus.pk}/search/?q=chess+opening&mode=hybrid&k=2").content.decode()
    assert results.index("The Sicilian Defence") < results.index("#1 · by meaning: #")  # its rank, not a score
    bad = client.get(f"/corpora/{corpus.pk}/search/?q=chess&mode=fuzzy")
    assert 'class="error"' in bad.content.decode() and "mode" in bad.content.decode()  # shown in #results
    doc = Document.objects.get(title="Sourdough baking")
    assert "tokens 0" in client.get(f"/corpora/{corpus.pk}/documents/{doc.pk}/").content.decode()


def test_only_admins_see_and_use_the_upload_form(client, reader, admin_user, corpus, rq_queues):
    client.force_login(reader)
    upload = SimpleUploadedFile("a.txt", b"some text")
    assert client.post(f"/corpora/{corpus.pk}/upload/", {"file": upload}).status_code == 403
    client.force_login(admin_user)
    assert "Upload and ingest" in client.get(f"/corpora/{corpus.pk}/").content.decode()
    response = client.post(f"/corpora/{corpus.pk}/upload/", {"file": SimpleUploadedFile("a.txt", b"some text")})
    assert response.status_code == 302
    corpus.refresh_from_db()
    assert corpus.status == "queued" and corpus.job_id


def test_a_bad_upload_shows_a_form_error_naming_the_problem(client, admin_user, corpus):
    client.force_login(admin_user)
    response = client.post(f"/corpora/{corpus.pk}/upload/", {"file": SimpleUploadedFile("x.txt", "é".encode("latin-1") * 10)})
    page = response.content.decode()
    assert response.status_code == 400 and "errorlist" in page and "not valid UTF-8" in page
    response = client.post(f"/corpora/{corpus.pk}/upload/", {"file": SimpleUploadedFile("x.exe", b"MZ")})
    assert "unsupported file type (.exe)" in response.content.decode()
    corpus.refresh_from_db()
    assert corpus.status == "empty"


def test_stored_documents_and_the_ingests_progress_read_consistently(client, reader, corpus):
    """A corpus holding 1000 documents from an earlier ingest, 576 of a 9033-document source read by this one: the
    stored count, the percentage and the done / total each say what they count, and the percentage is done / total."""
    Corpus.objects.filter(pk=corpus.pk).update(doc_count=1576, chunk_count=4000, status="ingesting",
                                               progress_done=576, progress_total=9033)
    client.force_login(reader)
    listing = client.get("/corpora/").content.decode()
    assert "Documents stored</th>" in listing and ">1576<" in listing
    assert "6% of this ingest: 576 / 9033 documents of its source read" in listing
    partial = client.get(f"/corpora/{corpus.pk}/progress/").content.decode()
    assert "1576 documents stored · 4000 chunks" in partial
    assert "this ingest: 576 / 9033 documents of its source read (6%)" in partial
    assert 'aria-valuenow="6"' in partial
