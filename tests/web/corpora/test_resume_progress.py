"""A resumed ingest's progress counts the whole source: it goes on from where it stopped (64 / 150), not from 0.

Against the real database and queue: the ingest job (``execute_ingest``, what the worker runs) is interrupted
part-way by a real Postgres error (a trigger refusing one chunk of the second batch, as a dying database or
worker leaves the first batch stored and the second rolled back), resumed through the API, and run again.
A second trigger logs every progress value the corpus row takes, so the test sees the progress of the whole
resumed run, not only its end.
"""
import json

import pytest
from django.db import connection

from apps.corpora.jobs import execute_ingest
from apps.corpora.models import Corpus, Document, Ingest
from apps.corpora.uploads import accept_file

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = 150  # three batches of BATCH_DOCS = 64


def _jsonl() -> bytes:
    rows = [{"title": f"Harbour {i}", "text": f"Harbour number {i} shelters {i * 3} boats and a lighthouse."}
            for i in range(DOCUMENTS)]
    rows[100]["text"] += " EXPLODE"  # in the second batch (documents 64..127)
    return "\n".join(json.dumps(r) for r in rows).encode()


@pytest.fixture
def traps():
    with connection.cursor() as cur:
        cur.execute("""
            CREATE FUNCTION refuse_explode() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.text LIKE '%%EXPLODE%%' THEN RAISE EXCEPTION 'refused by test trigger'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse_explode BEFORE INSERT ON corpora_chunk FOR EACH ROW EXECUTE FUNCTION refuse_explode();
            CREATE TABLE progress_log (id serial PRIMARY KEY, status text, done int, total int);
            CREATE FUNCTION log_progress() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO progress_log (status, done, total) VALUES (NEW.status, NEW.progress_done, NEW.progress_total);
                  RETURN NEW; END $$;
            CREATE TRIGGER log_progress AFTER UPDATE ON corpora_corpus FOR EACH ROW EXECUTE FUNCTION log_progress();
        """)
    yield
    with connection.cursor() as cur:
        cur.execute("""DROP TRIGGER IF EXISTS refuse_explode ON corpora_chunk; DROP FUNCTION IF EXISTS refuse_explode();
                       DROP TRIGGER IF EXISTS log_progress ON corpora_corpus; DROP FUNCTION IF EXISTS log_progress();
                       DROP TABLE IF EXISTS progress_log;""")


def _log_since(mark: int) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute("SELECT status, done, total FROM progress_log WHERE id > %s ORDER BY id", [mark])
        return cur.fetchall()


def _mark() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT COALESCE(MAX(id), 0) FROM progress_log")
        return cur.fetchone()[0]


def test_a_resumed_ingest_continues_its_progress_from_where_it_stopped(traps, rq_queues, admin_user, client):
    corpus = Corpus.objects.create(name="resumed-progress")
    accept_file(corpus, "harbours.jsonl", _jsonl())
    ingest = corpus.ingests.get()

    assert "failed" in execute_ingest(ingest.pk)  # the second batch hit the trap: the job stopped
    ingest.refresh_from_db()
    corpus.refresh_from_db()
    assert ingest.status == "failed" and ingest.resumable and ingest.resume_from == 64
    assert (corpus.status, corpus.progress_done, corpus.progress_total) == ("failed", 64, DOCUMENTS)
    assert f"stopped at 64 of {DOCUMENTS}" in corpus.errors[-1]
    assert Document.objects.filter(corpus=corpus).count() == 64

    with connection.cursor() as cur:  # the cause is gone (the database is back, the worker restarted)
        cur.execute("DROP TRIGGER refuse_explode ON corpora_chunk")
    client.force_login(admin_user)
    resumed = client.post(f"/api/v1/corpora/{corpus.pk}/resume/")
    assert resumed.status_code == 202, resumed.content
    progress = resumed.json()["progress"]
    assert (progress["status"], progress["documents_done"], progress["documents_total"]) == ("queued", 64, DOCUMENTS)
    page = client.get(f"/corpora/{corpus.pk}/progress/").content.decode()
    assert f"64 / {DOCUMENTS} documents" in page

    mark = _mark()
    assert "finished" in execute_ingest(ingest.pk)  # the resumed job, as a worker runs it
    seen = _log_since(mark)
    running = [done for status, done, total in seen if status == "ingesting"]
    assert all(total == DOCUMENTS for _, _, total in seen), seen
    assert running[0] == 64, seen  # it starts where it stopped, not at 0
    assert running == sorted(running) and running[-1] == DOCUMENTS, seen  # and only climbs, to the whole source
    assert 64 < running[1] < DOCUMENTS, seen  # with a step in between (the second batch)

    corpus.refresh_from_db()
    assert (corpus.status, corpus.progress_done, corpus.progress_total, corpus.percent) == ("ready", DOCUMENTS,
                                                                                          DOCUMENTS, 100)
    assert corpus.skipped_duplicates == 0  # what the first attempt stored is not counted as duplicates
    assert Document.objects.filter(corpus=corpus).count() == DOCUMENTS == corpus.doc_count
    assert Document.objects.filter(corpus=corpus).values("content_hash").distinct().count() == DOCUMENTS
    assert Ingest.objects.get(pk=ingest.pk).status == "finished"


def test_a_new_upload_after_a_finished_ingest_starts_its_progress_at_zero(rq_queues):
    corpus = Corpus.objects.create(name="fresh-progress")
    accept_file(corpus, "a.jsonl", json.dumps({"title": "One", "text": "the first harbour"}).encode())
    first = corpus.ingests.get()
    assert "finished" in execute_ingest(first.pk)
    accept_file(corpus, "b.jsonl", "\n".join(json.dumps({"title": f"T{i}", "text": f"another harbour {i}"})
                                             for i in range(3)).encode())
    corpus.refresh_from_db()
    assert (corpus.status, corpus.progress_done, corpus.progress_total) == ("queued", 0, 0)
    second = corpus.ingests.exclude(pk=first.pk).get()
    assert second.resume_from == 0 and "finished" in execute_ingest(second.pk)
    corpus.refresh_from_db()
    assert (corpus.progress_done, corpus.progress_total, corpus.doc_count) == (3, 3, 4)
