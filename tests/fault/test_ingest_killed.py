"""An ingest whose worker is SIGKILLed part-way is reaped like a run and resumed from what is stored.

A real ``manage.py rqworker short`` ingests an uploaded JSONL of 2,500 documents. Once the first batches
are stored, only the RQ parent gets SIGKILL (its work horse is in a process group of its own, as
in production): the work horse must end by itself. Within the heartbeat window the reaper fails the
ingest (resumable), the corpus says where it stopped and how to resume, and the upload is still on
disk. A resume through the API, on a new worker, continues after the documents stored before the kill
(its progress goes on from there), every document is there exactly once at the end, and the upload is removed.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from apps.corpora.models import Chunk, Corpus, Document, Ingest
from apps.corpora.uploads import accept_file
from tests.fault.conftest import HEARTBEAT_SECONDS, _descendants, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = 2500
WORDS = ("river", "mountain", "harbour", "glacier", "desert", "forest", "island", "valley", "canyon", "meadow")


def _jsonl() -> bytes:
    lines = []
    for i in range(DOCUMENTS):
        words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(30))
        lines.append(json.dumps({"title": f"Place {i}", "text": f"Place number {i} is known for its {words}."}))
    return ("\n".join(lines) + "\n").encode()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_ingest_is_reaped_and_resumes_from_what_is_stored(roles, admin_user, client, worker):
    corpus = Corpus.objects.create(name="killed-mid-ingest")
    stored = Path(accept_file(corpus, "places.jsonl", _jsonl())["stored"])
    ingest = corpus.ingests.get()
    w = worker("short")

    def part_way():
        c = Corpus.objects.get(pk=corpus.pk)
        return c if c.status == "ingesting" and 0 < c.progress_done < DOCUMENTS // 2 else None

    wait_for(part_way, 240, "the first batches to be stored", interval=0.02, on_timeout=w.output)
    horse = [pid for pid in _descendants(w.proc.pid) if _alive(pid)]
    assert horse, "the worker runs no work horse"
    os.kill(w.proc.pid, signal.SIGKILL)  # the RQ parent only
    w.proc.wait(timeout=30)
    wait_for(lambda: not any(_alive(pid) for pid in horse), 15, "the orphaned work horse to stop itself",
             on_timeout=w.output)

    kept = Document.objects.filter(corpus=corpus).count()
    assert 0 < kept < DOCUMENTS
    assert Ingest.objects.get(pk=ingest.pk).status == "running"  # nobody told the database
    reaped = wait_for(lambda: Ingest.reap_stale(), HEARTBEAT_SECONDS * 4, "the reaper to fail the silent ingest",
                      interval=0.5)
    assert reaped == [ingest.pk]
    ingest.refresh_from_db()
    corpus.refresh_from_db()
    assert ingest.status == "failed" and ingest.resumable and "worker stopped responding" in ingest.error
    assert corpus.status == "failed"
    assert f"stopped at {corpus.progress_done} of {DOCUMENTS}" in corpus.errors[-1] and "Resume" in corpus.errors[-1]
    assert stored.is_file(), "the upload was removed although the ingest can be resumed"

    client.force_login(admin_user)
    assert 'id="resume-ingest"' in client.get(f"/corpora/{corpus.pk}/").content.decode()
    resumed = client.post(f"/api/v1/corpora/{corpus.pk}/resume/")
    assert resumed.status_code == 202, resumed.content
    assert resumed.json()["progress"]["status"] == "queued"
    assert resumed.json()["progress"]["documents_done"] == kept  # the progress goes on from there, not from 0
    again = client.post(f"/api/v1/corpora/{corpus.pk}/resume/")
    assert again.status_code == 409 and "nothing to resume" in again.json()["error"]

    w2 = worker("short")
    done = wait_for(lambda: Corpus.objects.filter(pk=corpus.pk, status__in=["ready", "failed"]).first(), 300,
                    "the resumed ingest to end", interval=0.5, on_timeout=w2.output)
    assert done.status == "ready", done.errors
    assert Document.objects.filter(corpus=corpus).count() == DOCUMENTS == done.doc_count
    assert Document.objects.filter(corpus=corpus).values("content_hash").distinct().count() == DOCUMENTS
    assert Chunk.objects.filter(corpus=corpus).count() == done.chunk_count
    assert done.skipped_duplicates == 0  # it went on after what was stored before the kill, not through it again
    ingest.refresh_from_db()
    assert ingest.status == "finished" and not stored.exists()  # the upload is removed once the ingest ended
