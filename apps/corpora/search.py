"""Search a corpus: `dense` (pgvector HNSW, cosine), `lexical` (Postgres full text), `hybrid`
(reciprocal-rank fusion of both; the default).

Batches: all queries are embedded in one call and each mode runs ONE SQL statement for the
whole batch (`unnest(...) WITH ORDINALITY` joined LATERAL to a per-query top-n), so a
rollout's 32 pending queries cost one round trip per mode.

Dense: the HNSW index is on `embedding::halfvec(384)` (models.Chunk), so the query orders by
that same expression (16-bit cosine distance; half the bytes per visited element) and
returns its n nearest re-ranked and scored by the full-precision cosine. `hnsw.ef_search` =
max(EF_SEARCH, 2n) for recall (see benchmarks/RESULTS.md), and `hnsw.iterative_scan =
strict_order` so filtering on the corpus never returns fewer than n rows when other corpora
share the index.
Lexical: websearch_to_tsquery parses the query (quotes, -negation); its AND between words is
turned into OR so a natural-language question still matches, and ts_rank_cd (cover density)
ranks documents that hold more of the words, closer together, first, divided by the chunk's
length (normalization 2): without it a long chunk that repeats one common word of the question
("painting") outranked the chunk about the question's subject ("who painted the Mona Lisa" put
the Qingming Festival scroll, which says "painting" five times, before the Mona Lisa). Each hit
also names the query's words (stems) it holds (``matched``).
Hybrid: reciprocal-rank fusion; a tie (one hit first by meaning, the other first by words) goes
to the better rank by meaning, then the lower chunk id. Each fused hit keeps its rank in each
list (``ranks``), which the search page shows instead of the fused score.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from django.db import connection

from apps.corpora.embedder import embedder_for
from apps.corpora.models import EMBEDDING_DIM

MODES = ("hybrid", "dense", "lexical")
EF_SEARCH = 100
RRF_K = 60
MAX_K = 100


class SearchError(ValueError):
    """Bad search arguments; the message says how to fix them."""


@dataclass
class Hit:
    document_id: int
    chunk_id: int
    title: str
    text: str
    score: float
    matched: list[str] = field(default_factory=list)  # the query's stems the chunk holds (lexical)
    ranks: dict[str, int] = field(default_factory=dict)  # mode -> this hit's rank there (from 1)

    def to_dict(self) -> dict:
        return asdict(self)


def vector_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


DENSE_SQL = """
SELECT q.i, c.id, c.document_id, d.title, c.text, 1 - c.dist AS score
FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, i)
CROSS JOIN LATERAL (
    SELECT id, document_id, text, embedding <=> q.v AS dist
    FROM corpora_chunk WHERE corpus_id = %s
    ORDER BY embedding::halfvec({dim}) <=> q.v::halfvec({dim}) LIMIT %s
) c
JOIN corpora_document d ON d.id = c.document_id
ORDER BY q.i, c.dist, c.id
""".format(dim=EMBEDDING_DIM)

LEXICAL_SQL = """
SELECT q.i, c.id, c.document_id, d.title, c.text, c.rank AS score,
       ARRAY(SELECT unnest(tsvector_to_array(c.tsv)) INTERSECT SELECT unnest(tsvector_to_array(w.words)) ORDER BY 1)
FROM unnest(%s::text[]) WITH ORDINALITY AS q(t, i)
CROSS JOIN LATERAL (
    SELECT replace(websearch_to_tsquery('english', q.t)::text, ' & ', ' | ')::tsquery AS tsq,
           to_tsvector('english', q.t) AS words
) w
CROSS JOIN LATERAL (
    SELECT id, document_id, text, tsv, ts_rank_cd(tsv, w.tsq, 2) AS rank
    FROM corpora_chunk WHERE corpus_id = %s AND tsv @@ w.tsq
    ORDER BY rank DESC, id LIMIT %s
) c
JOIN corpora_document d ON d.id = c.document_id
ORDER BY q.i, c.rank DESC, c.id
"""


def _group(rows, n_queries: int, mode: str) -> list[list[Hit]]:
    out: list[list[Hit]] = [[] for _ in range(n_queries)]
    for i, chunk_id, document_id, title, text, score, *matched in rows:
        ranking = out[i - 1]
        ranking.append(Hit(document_id, chunk_id, title, text, float(score), list(matched[0]) if matched else [],
                           {mode: len(ranking) + 1}))
    return out


def dense(corpus, queries: list[str], n: int, ef_search: int = EF_SEARCH) -> list[list[Hit]]:
    vectors = embedder_for(corpus).encode(queries)
    return dense_by_vectors(corpus.pk, vectors, n, ef_search)


def _vector_settings(cur, ef: int) -> None:
    """hnsw.ef_search, iterative scans, and no JIT (a big table's cost estimate would JIT-compile every
    query). Outside a transaction they are set once per connection (each round trip counts on a busy
    CPU); inside one, SET LOCAL, since a rollback would undo a session SET."""
    settings = f"hnsw.ef_search = {int(ef)}; SET{{local}} hnsw.iterative_scan = strict_order; SET{{local}} jit = off"
    if connection.in_atomic_block:
        cur.execute(("SET LOCAL " + settings).format(local=" LOCAL"))
        return
    raw = connection.connection
    if getattr(raw, "_selfplay_ef_search", None) != ef:
        cur.execute(("SET " + settings).format(local=""))
        raw._selfplay_ef_search = ef


def dense_by_vectors(corpus_id: int, vectors: np.ndarray, n: int, ef_search: int = EF_SEARCH) -> list[list[Hit]]:
    with connection.cursor() as cur:
        _vector_settings(cur, max(ef_search, 2 * n))
        cur.execute(DENSE_SQL, [[vector_literal(v) for v in vectors], corpus_id, n])
        return _group(cur.fetchall(), len(vectors), "dense")


def lexical(corpus, queries: list[str], n: int) -> list[list[Hit]]:
    with connection.cursor() as cur:
        cur.execute(LEXICAL_SQL, [list(queries), corpus.pk, n])
        return _group(cur.fetchall(), len(queries), "lexical")


def fuse(rankings: list[list[Hit]], k: int, rrf_k: int = RRF_K) -> list[Hit]:
    """Reciprocal-rank fusion: score(chunk) = sum over rankings of 1 / (rrf_k + rank), rank from 1.

    A tie goes to the better rank in the first ranking (dense: by meaning), then the lower chunk
    id. Two hits ranked 1 and 2 in swapped order tie exactly (1/61 + 1/62 each)::

    >>> a, b = Hit(1, 10, "A", "", 0.6, ranks={"dense": 1}), Hit(2, 5, "B", "", 0.4, ranks={"dense": 2})
    >>> la, lb = Hit(1, 10, "A", "", 0.1, ["a"], {"lexical": 2}), Hit(2, 5, "B", "", 0.2, ["b"], {"lexical": 1})
    >>> [(h.title, h.ranks, h.matched) for h in fuse([[a, b], [lb, la]], 2)]
    [('A', {'dense': 1, 'lexical': 2}, ['a']), ('B', {'dense': 2, 'lexical': 1}, ['b'])]
    """
    scores: dict[int, float] = {}
    hits: dict[int, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (rrf_k + rank)
            first = hits.setdefault(hit.chunk_id, Hit(hit.document_id, hit.chunk_id, hit.title, hit.text, 0.0))
            first.ranks.update(hit.ranks)
            first.matched = first.matched or hit.matched
    lead = next(iter(rankings[0][0].ranks), None) if rankings and rankings[0] else None
    best = sorted(scores, key=lambda cid: (-round(scores[cid], 12), hits[cid].ranks.get(lead, MAX_K * 10), cid))[:k]
    for c in best:
        hits[c].score = round(scores[c], 6)
    return [hits[c] for c in best]


def validate(queries, k, mode) -> tuple[list[str], int, str]:
    if isinstance(queries, str):
        queries = [queries]
    queries = [str(q).strip() for q in queries]
    if not queries or any(not q for q in queries):
        raise SearchError("Empty query: pass some words to search for (q=...).")
    if any(len(q) > 2000 for q in queries):
        raise SearchError("Query too long: keep each query under 2,000 characters.")
    try:
        k = int(k)
    except (TypeError, ValueError):
        raise SearchError(f"k must be a whole number from 1 to {MAX_K} (got {k!r}).") from None
    if not 1 <= k <= MAX_K:
        raise SearchError(f"k must be from 1 to {MAX_K} (got {k}).")
    mode = (mode or "hybrid").lower()
    if mode not in MODES:
        raise SearchError(f"mode must be one of {', '.join(MODES)} (got {mode!r}).")
    return queries, k, mode


def search_many(corpus, queries: list[str], k: int = 5, mode: str = "hybrid",
                vectors: np.ndarray | None = None) -> list[list[Hit]]:
    """Top-k hits for each query, in the order of the queries. ``vectors``: the queries' embeddings when
    the caller already has them (apps/corpora/retriever.py embeds a batch once, then searches it in slices)."""
    queries, k, mode = validate(queries, k, mode)
    if mode == "lexical":
        return lexical(corpus, queries, k)
    if vectors is None:
        vectors = embedder_for(corpus).encode(queries)
    elif len(vectors) != len(queries):
        raise SearchError(f"{len(vectors)} query vectors for {len(queries)} queries.")
    if mode == "dense":
        return dense_by_vectors(corpus.pk, vectors, k)
    pool = max(4 * k, 40)
    dense_hits, lexical_hits = dense_by_vectors(corpus.pk, vectors, pool), lexical(corpus, queries, pool)
    return [fuse([d, lx], k) for d, lx in zip(dense_hits, lexical_hits)]


def search(corpus, query: str, k: int = 5, mode: str = "hybrid") -> list[Hit]:
    return search_many(corpus, [query], k, mode)[0]
