"""Fixtures of the bad-input tests: the web personas, a private Redis db for the queues, uploads
in a temporary MEDIA_ROOT, and a corpus that already holds documents (so every test can check
that a refused input lost nothing that was stored before).

Real services only: the embedded Postgres+pgvector and Redis started by tests/conftest.py, the
bundled all-MiniLM-L6-v2 embedder.
"""
from __future__ import annotations

import os

import pytest

from selfplay_web.test_settings import JOBS_TEST_REDIS_DB

from tests.web.conftest import admin_user, reader, researcher, reviewer  # noqa: F401  (fixtures)

REDIS_DB = int(os.environ.get("SELFPLAY_ROBUST_TEST_REDIS_DB", JOBS_TEST_REDIS_DB))  # 13 outside pytest-xdist

KEPT = [
    ("Glaciers of Patagonia", "The Perito Moreno glacier in Patagonia advances across Lake Argentino and "
                              "periodically dams it until the ice bridge ruptures in a spectacular collapse."),
    ("Honeybee dances", "Forager honeybees perform a waggle dance whose angle and duration tell nest mates the "
                        "direction and distance of a flower patch."),
]


@pytest.fixture(autouse=True)
def private_redis(settings):
    """RQ queues on a Redis db of their own, emptied around each test (other sessions flush db 9)."""
    base = settings.REDIS_URL.rsplit("/", 1)[0]
    url = f"{base}/{REDIS_DB}"
    settings.RQ_QUEUES = {name: {**cfg, "URL": url} for name, cfg in settings.RQ_QUEUES.items()}
    import django_rq

    conn = django_rq.get_connection("default")
    conn.flushdb()
    yield url
    conn.flushdb()


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The personas are created per test; the default PBKDF2 hasher costs ~1 s each on a busy 2-core box."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="module")
def _kept_corpus_id(django_db_setup, django_db_blocker):
    """Committed once per module (each test's own changes roll back with its transaction)."""
    from apps.corpora.models import Corpus
    from apps.corpora.uploads import add_document

    with django_db_blocker.unblock():
        Corpus.objects.filter(name="kept").delete()
        corpus = Corpus.objects.create(name="kept", description="documents stored before the bad input")
        for title, text in KEPT:
            add_document(corpus, title, text)
    yield corpus.pk
    with django_db_blocker.unblock():
        Corpus.objects.filter(pk=corpus.pk).delete()


@pytest.fixture
def kept_corpus(db, _kept_corpus_id):
    """A ready corpus with two documents, ingested for real (chunks, embeddings, tsvector)."""
    from apps.corpora.models import Corpus

    corpus = Corpus.objects.get(pk=_kept_corpus_id)
    assert corpus.documents.count() == 2 and corpus.status == Corpus.Status.READY
    return corpus


def snapshot(corpus) -> tuple:
    """What must not change when an input is refused: document ids, chunk count, the corpus counters."""
    from apps.corpora.models import Chunk

    corpus.refresh_from_db()
    return (sorted(corpus.documents.values_list("id", flat=True)), Chunk.objects.filter(corpus=corpus).count(),
            corpus.doc_count, corpus.chunk_count)


def assert_still_searchable(corpus) -> None:
    """Both kept documents are still found by a dense and a lexical search."""
    from apps.corpora.search import search

    for mode, query, title in [("dense", "glacier ice dam collapse", KEPT[0][0]),
                               ("lexical", "waggle dance", KEPT[1][0])]:
        hits = search(corpus, query, 3, mode)
        assert hits and hits[0].title == title, (mode, [h.title for h in hits])
