"""The ingest job against real Postgres+pgvector: every format, dedup, atomic batches, search, retriever."""
import numpy as np
import pytest
from django.db import connection

from apps.corpora.ingest import ingest_documents
from apps.corpora.jobs import ingest_upload
from apps.corpora.models import Chunk, Corpus, Document
from apps.corpora.parsing import ParsedDoc
from apps.corpora.search import search, search_many
from apps.corpora.uploads import accept_file, upload_dir

from .conftest import DOCS, jsonl


def _ingest_file(corpus, name, data):
    """What the API does, then the job function itself (no worker)."""
    result = accept_file(corpus, name, data, enqueue=False)
    return ingest_upload(corpus.pk, result["stored"], name)


def test_it_ingests_each_format_with_embeddings_and_tsvector(corpus, sample_files):
    for name, data in sample_files.items():
        result = _ingest_file(corpus, name, data)
        assert result["documents"] >= 1 and not result["errors"], (name, result)
    corpus.refresh_from_db()
    assert corpus.status == Corpus.Status.READY
    assert corpus.doc_count == Document.objects.filter(corpus=corpus).count() == 6
    assert corpus.chunk_count == Chunk.objects.filter(corpus=corpus).count() >= 6
    chunk = Chunk.objects.filter(corpus=corpus, document__title="Sourdough baking").get()
    assert np.isclose(np.linalg.norm(chunk.embedding), 1.0, atol=1e-3) and len(chunk.embedding) == 384
    with connection.cursor() as cur:
        cur.execute("SELECT tsv::text FROM corpora_chunk WHERE id = %s", [chunk.pk])
        assert "'starter'" in cur.fetchone()[0]
    assert list(upload_dir().iterdir()) == []  # the stored upload is removed after the job


def test_progress_counts_documents_done_of_total(corpus):
    docs = [ParsedDoc(f"Note {i}", f"note number {i} about topic {i * 7}", "t") for i in range(5)]
    corpus.begin_ingest(len(docs))
    seen = []
    ingest_documents(corpus, docs, batch_docs=2, on_batch=lambda s: seen.append(Corpus.objects.get(pk=corpus.pk).progress_done))
    assert seen == [2, 4, 5]
    corpus.refresh_from_db()
    assert corpus.progress()["documents_total"] == 5 and corpus.percent == 100


def test_duplicates_are_skipped_and_counted(corpus):
    title, text = DOCS["volcano"]
    first = _ingest_file(corpus, "a.jsonl", jsonl({"title": title, "text": text}, {"title": "copy", "text": "  " + text.replace(" ", "\n")}))
    assert first["documents"] == 1 and first["skipped_duplicates"] == 1
    again = _ingest_file(corpus, "a.txt", text.encode())
    assert again["documents"] == 0 and again["skipped_duplicates"] == 1
    corpus.refresh_from_db()
    assert corpus.doc_count == 1 and corpus.skipped_duplicates == 1  # counts of the last ingestion


def test_broken_jsonl_lines_are_reported_and_good_lines_kept(corpus):
    result = _ingest_file(corpus, "rows.jsonl", jsonl({"title": "Good", "text": "a fine line"}, "{broken", {"title": "x"}))
    assert result["documents"] == 1
    corpus.refresh_from_db()
    assert corpus.status == "ready" and [e.split(":")[0] for e in corpus.errors] == ["rows.jsonl line 2", "rows.jsonl line 3"]


def test_a_failing_batch_leaves_no_half_inserted_document(corpus):
    """A real database error in the middle of COPY (a trigger refusing one chunk) rolls the batch back."""
    with connection.cursor() as cur:
        cur.execute("""
            CREATE FUNCTION refuse_explode() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.text LIKE '%%EXPLODE%%' THEN RAISE EXCEPTION 'refused by test trigger'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse_explode BEFORE INSERT ON corpora_chunk FOR EACH ROW EXECUTE FUNCTION refuse_explode();
        """)
    docs = [ParsedDoc("ok 1", "first good document", "t"), ParsedDoc("ok 2", "second good document", "t"),
            ParsedDoc("fine", "third document, in the failing batch", "t"), ParsedDoc("bad", "this one will EXPLODE", "t")]
    with pytest.raises(Exception, match="refused by test trigger"):
        ingest_documents(corpus, docs, batch_docs=2)
    titles = sorted(Document.objects.filter(corpus=corpus).values_list("title", flat=True))
    assert titles == ["ok 1", "ok 2"]  # the first batch is whole, the second is gone entirely
    assert not Document.objects.filter(corpus=corpus, chunks__isnull=True).exists()
    corpus.refresh_from_db()
    assert corpus.doc_count == 2 and corpus.chunk_count == Chunk.objects.filter(corpus=corpus).count()


def test_hybrid_search_finds_the_document_a_query_was_written_for(corpus, sample_files):
    for name, data in sample_files.items():
        _ingest_file(corpus, name, data)
    queries = {
        "Which eruption closed European airspace?": "iceland",
        "how do bakers keep a wild yeast starter alive": "Sourdough baking",
        "chess opening 1. e4 c5": "The Sicilian Defence",
        "why are there two high tides each day": "Tides",
        "penguins in the antarctic winter": "paper",
    }
    for mode in ("hybrid", "dense", "lexical"):
        results = search_many(corpus, list(queries), k=3, mode=mode)
        for (query, title), hits in zip(queries.items(), results):
            if mode == "lexical" and not hits:
                continue  # lexical needs shared words; hybrid and dense must always answer
            assert hits[0].title == title, (mode, query, [h.title for h in hits])
    hit = search(corpus, "sourdough", k=1)[0]
    assert hit.document_id == Document.objects.get(title="Sourdough baking").pk and hit.score > 0


def test_a_corpus_with_another_dimension_is_refused(corpus):
    from apps.corpora.embedder import EmbedderError

    odd = Corpus.objects.create(name="odd", embedding_dim=768)
    with pytest.raises(EmbedderError, match="makes 384-dimension vectors but corpus 'odd' stores 768-dimension"):
        search(odd, "anything")
    with pytest.raises(EmbedderError, match="768-dimension"):
        ingest_documents(odd, [ParsedDoc("t", "some text", "s")])
    assert not Document.objects.filter(corpus=odd).exists()
