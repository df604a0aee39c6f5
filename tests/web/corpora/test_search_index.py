"""Dense search goes through the halfvec HNSW index (issue #3) and hybrid search still finds what a query
was written for. Real Postgres + pgvector, real all-MiniLM-L6-v2 embeddings."""
import numpy as np
from django.db import connection

from apps.corpora.ingest import ingest_documents
from apps.corpora.models import EMBEDDING_DIM, HALFVEC_INDEX, Chunk
from apps.corpora.parsing import ParsedDoc
from apps.corpora.search import DENSE_SQL, dense, search_many, vector_literal

from .conftest import DOCS

EXTRA = [
    ("Photosynthesis", "Plants turn light, water and carbon dioxide into sugar and oxygen in their chloroplasts."),
    ("Tides", "The Moon's gravity raises two bulges of ocean water, giving two high tides a day on most coasts."),
    ("Jazz", "Jazz grew in New Orleans from blues and ragtime; improvisation over chord changes is its heart."),
]


def _ingest(corpus):
    ingest_documents(corpus, [ParsedDoc(t, x, "t") for t, x in list(DOCS.values()) + EXTRA])


def _plan(corpus, vector: np.ndarray) -> str:
    """EXPLAIN of the production dense statement. Seq scans and sorts are priced out so the plan shows
    whether the statement CAN use the index: on a table this small the planner would rightly scan it."""
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("SET LOCAL enable_sort = off")
        cur.execute("EXPLAIN " + DENSE_SQL, [[vector_literal(vector)], corpus.pk, 5])
        return "\n".join(row[0] for row in cur.fetchall())


def test_the_chunk_index_is_hnsw_over_halfvec(db):
    with connection.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [HALFVEC_INDEX])
        (definition,) = cur.fetchone()
        cur.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'corpora_chunk' AND indexdef LIKE '%%hnsw%%'")
        (hnsw_indexes,) = cur.fetchone()
    assert "USING hnsw" in definition and f"halfvec({EMBEDDING_DIM})" in definition
    assert "halfvec_cosine_ops" in definition and hnsw_indexes == 1  # the full-precision index is gone


def test_dense_search_uses_the_halfvec_index(corpus):
    _ingest(corpus)
    vector = np.asarray(Chunk.objects.filter(corpus=corpus).first().embedding, dtype=np.float32)
    plan = _plan(corpus, vector)
    assert HALFVEC_INDEX in plan, plan
    assert "Index Scan" in plan, plan


def test_dense_scores_are_full_precision_cosine_in_order(corpus):
    _ingest(corpus)
    hits = dense(corpus, ["volcano eruption closed airspace"], 4)[0]
    assert hits[0].title == "Volcanoes of Iceland"
    stored = {c.id: np.asarray(c.embedding) for c in Chunk.objects.filter(corpus=corpus)}
    from apps.corpora.embedder import embedder_for

    query = embedder_for(corpus).encode(["volcano eruption closed airspace"])[0]
    for hit in hits:  # 1 - cosine distance of the float32 vectors, not of their 16-bit copies
        vector = stored[hit.chunk_id]
        cosine = float(vector @ query / (np.linalg.norm(vector) * np.linalg.norm(query)))
        assert abs(hit.score - cosine) < 1e-5
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_hybrid_search_returns_the_document_each_query_was_written_for(corpus):
    _ingest(corpus)
    queries = {
        "Which eruption closed European airspace?": "Volcanoes of Iceland",
        "how do bakers keep a wild yeast starter alive": "Sourdough baking",
        "chess opening 1. e4 c5": "The Sicilian Defence",
        "how do plants make sugar from sunlight": "Photosynthesis",
        "what does the pull of the Moon do to the oceans": "Tides",
        "improvised music from New Orleans": "Jazz",
    }
    results = search_many(corpus, list(queries), k=3, mode="hybrid")
    for (query, title), hits in zip(queries.items(), results):
        assert hits and hits[0].title == title, (query, [h.title for h in hits])
