"""The trainer-facing Retriever and DocumentSource over Postgres."""
import random
import time

import numpy as np
import pytest

from apps.corpora.ingest import ingest_documents
from apps.corpora.parsing import ParsedDoc
from apps.corpora.retriever import PgDocumentSource, PgvectorRetriever
from trainer.tools import Document, DocumentSource
from trainer.tools.retriever import Passage, Retriever

from .conftest import DOCS


def test_the_retriever_answers_a_batch_with_passages(corpus):
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    retriever = PgvectorRetriever(corpus)
    assert isinstance(retriever, Retriever) and retriever.mode == "dense"  # the papers' retrievers search by meaning
    results = retriever.search(["volcano eruption in Iceland", "", "Sicilian chess opening"], k=2)
    assert len(results) == 3 and results[1] == []
    assert all(isinstance(p, Passage) for p in results[0] + results[2]) and len(results[0]) == 2
    assert results[0][0].title == "Volcanoes of Iceland" and results[2][0].title == "The Sicilian Defence"
    assert results[0][0].document_id.isdigit() and results[0][0].score > results[0][1].score
    assert PgvectorRetriever(corpus.name, mode="hybrid").search(["sourdough"], 1)[0][0].title == "Sourdough baking"


def test_the_document_source_samples_with_the_given_rng(corpus):
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    source = PgDocumentSource(corpus.pk)
    assert len(source) == 3
    first = [d.id for d in source.sample(2, random.Random(7))]
    assert first == [d.id for d in source.sample(2, random.Random(7))] and len(set(first)) == 2
    many = source.sample(5, np.random.default_rng(0))
    assert len(many) == 5 and {d.title for d in many} <= {t for t, _ in DOCS.values()}
    assert all(d.text for d in many)
    assert isinstance(source, DocumentSource) and all(isinstance(d, Document) for d in many)  # the trainer's own class


def test_the_document_source_reads_the_ids_once_and_again_after_an_ingest(corpus):
    """A step's draw costs a look-up of the corpus row and one query for the drawn documents; it does not
    read every id of the corpus (1M at paper scale) each time. An ingest's new documents are drawn next."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    docs = [ParsedDoc(t, x, "t") for t, x in DOCS.values()]
    ingest_documents(corpus, docs[:2])
    source = PgDocumentSource(corpus)
    assert {d.title for d in source.sample(2, random.Random(1))} == {docs[0].title, docs[1].title}
    for seed in range(3):
        with CaptureQueriesContext(connection) as queries:
            drawn = source.sample(2, random.Random(seed))
        assert len(drawn) == 2
        reads_all_ids = [q["sql"] for q in queries.captured_queries
                         if "corpora_document" in q["sql"] and '"corpora_document"."id" IN' not in q["sql"]]
        assert reads_all_ids == [], reads_all_ids
    assert source.id_reads == 1

    ingest_documents(corpus, docs[2:])  # a third document: the next draw can pick it
    assert {d.title for d in source.sample(3, random.Random(0))} == {d.title for d in docs}
    assert len(source) == 3 and source.id_reads == 1 and source.new_id_reads == 1  # only ids above the newest known


def _bare_documents(corpus, n: int, start: int = 0, **fields):
    """n documents without chunks (a draw reads documents only), inserted in one statement."""
    from apps.corpora.models import Document as Row

    rows = Row.objects.bulk_create([Row(corpus=corpus, title=f"doc {i}", text=f"text of document {i}",
                                        content_hash=f"h{i}", **fields) for i in range(start, start + n)])
    type(corpus).objects.filter(pk=corpus.pk).update(doc_count=Row.objects.filter(corpus=corpus).count())
    return [r.id for r in rows]


def test_a_draw_picks_what_sampling_the_list_of_ids_picks_without_reading_it(corpus):
    """The ids of a corpus interleaved with another's (runs with gaps): a seeded draw gives the documents that
    rng.sample / Generator.choice over the ascending list of ids gives, and the ids are read as runs (one row
    per run, computed in Postgres), never as one row per document."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.corpora.models import Corpus

    other = Corpus.objects.create(name="interleaved", description="")
    ids = []
    for part in range(4):
        ids += _bare_documents(corpus, 50 + 7 * part, start=1000 * part)
        _bare_documents(other, 3, start=1000 * part)
    ids.sort()
    source = PgDocumentSource(corpus)
    with CaptureQueriesContext(connection) as queries:
        assert len(source) == len(ids)
    assert len(source._starts) == 4  # four runs, read as four rows
    assert any("row_number() OVER" in q["sql"] for q in queries.captured_queries)
    for seed in range(5):
        assert [int(d.id) for d in source.sample(20, random.Random(seed))] == random.Random(seed).sample(ids, 20)
        want = [ids[i] for i in np.random.default_rng(seed).choice(len(ids), size=20, replace=False)]
        assert [int(d.id) for d in source.sample(20, np.random.default_rng(seed))] == want
    assert source.ids_at(range(len(ids))) == ids
    assert source.id_reads == 1


def test_a_draw_reads_only_the_drawn_documents_by_primary_key(corpus):
    """5,000 documents: each query of a warm draw, run again under EXPLAIN ANALYZE, reads at most the drawn
    rows through an index (no Seq Scan over the corpus)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _bare_documents(corpus, 5000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE corpora_document")
    source = PgDocumentSource(corpus)
    source.sample(1, random.Random(0))
    with CaptureQueriesContext(connection) as queries:
        drawn = source.sample(16, random.Random(1))
    assert len(drawn) == 16
    on_documents = [q["sql"] for q in queries.captured_queries if "corpora_document" in q["sql"]]
    assert len(on_documents) == 1, queries.captured_queries

    def nodes(plan):
        yield plan
        for child in plan.get("Plans", []):
            yield from nodes(child)

    for sql in on_documents:
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = cur.fetchone()[0][0]["Plan"]
        scans = [n for n in nodes(plan) if n.get("Relation Name") == "corpora_document"]
        assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), plan
        assert all(n["Actual Rows"] * n.get("Actual Loops", 1) <= 16 and not n.get("Rows Removed by Filter")
                   for n in scans), plan


def test_documents_committed_out_of_id_order_are_found(corpus):
    """An ingest that commits after a later one (its ids below the newest known): reading only the ids above
    the newest one finds too few documents for doc_count, so every run is read again."""
    from apps.corpora.models import Corpus, Document as Row

    first = _bare_documents(corpus, 10)
    source = PgDocumentSource(corpus)
    assert len(source) == 10
    late = Row.objects.create(id=first[0] - 5, corpus=corpus, title="late", text="late text", content_hash="late")
    Corpus.objects.filter(pk=corpus.pk).update(doc_count=11)
    assert len(source) == 11 and source.new_id_reads == 1 and source.id_reads == 2
    assert source.ids_at([0]) == [late.id]
    assert sorted(int(d.id) for d in source.sample(11, random.Random(0))) == sorted([late.id, *first])


@pytest.mark.django_db(transaction=True)
def test_a_large_batch_is_searched_in_slices_on_connections_of_their_own(monkeypatch):
    """An SSP turn's 256 queries: embedded once, then searched in slices at the same time, one Postgres
    backend each (a statement runs on one core); the answers are those of one statement, in order."""
    from django.db import connection

    import apps.corpora.retriever as module
    from apps.corpora.models import Corpus

    corpus = Corpus.objects.create(name="slices", description="")
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in DOCS.values()])
    asked = ["volcano eruption in Iceland", "Sicilian chess opening", "sourdough starter", "", "wild yeast"] * 30  # 120 queries + 30 empty
    one = PgvectorRetriever(corpus, workers=1).search(asked, k=2)
    calls = []
    real = module.search_many

    def spy(corpus, texts, k, mode, vectors=None):
        hits = real(corpus, texts, k, mode, vectors)
        calls.append((len(texts), vectors is not None, connection.connection.info.backend_pid))
        return hits

    monkeypatch.setattr(module, "search_many", spy)
    with PgvectorRetriever(corpus, workers=3) as retriever:
        got = retriever.search(asked, k=2)
        again = retriever.search(asked, k=2)  # the worker threads keep their connections from call to call
    assert [[p.chunk_id for p in r] for r in got] == [[p.chunk_id for p in r] for r in one]
    assert got[0][0].title == "Volcanoes of Iceland" and got[3] == [] and got[1][0].title == "The Sicilian Defence"
    connection.ensure_connection()
    assert sorted(n for n, _, _ in calls) == [40, 40, 40, 40, 40, 40] and all(embedded for _, embedded, _ in calls)
    assert again == got
    backends = {pid for _, _, pid in calls}
    assert 1 <= len(backends) <= 3 and connection.connection.info.backend_pid not in backends  # idle threads take the next piece
    for _ in range(100):  # closed with the retriever (a backend exits just after its client hangs up)
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [list(backends)])
            if cur.fetchone()[0] == 0:
                break
        time.sleep(0.1)
    else:
        raise AssertionError("the worker threads' connections outlived the retriever")
    calls.clear()
    PgvectorRetriever(corpus, workers=3).search(asked[:40], k=2)  # under 2 x SLICE queries: one statement
    assert len(calls) == 1 and calls[0][2] == connection.connection.info.backend_pid


def test_the_retriever_takes_its_connections_from_the_setting(settings, corpus):
    """SELFPLAY_SEARCH_WORKERS (checked at start-up: tests/web/test_foundation.py), dense by default."""
    settings.SEARCH_WORKERS = 3
    retriever = PgvectorRetriever(corpus)
    assert (retriever.workers, retriever.mode) == (3, "dense")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        PgvectorRetriever(corpus, workers=0)
