"""Search and ingestion benchmark for apps/corpora: pgvector (our SQL) vs FAISS, ours vs default encode.

Prints one JSON line per part:
  * "embed"     ingestion embedding throughput: our Embedder.encode vs SentenceTransformer.encode
                (defaults: fp32, batch 32) on the same chunk texts, alternating runs, best of --reps;
                plus end-to-end ingest (parse -> chunk -> embed -> COPY) documents/s.
  * "corpus"    the bundled Wikipedia corpus (--corpus, loaded by `manage.py load_wikipedia`):
                recall@10 of dense (HNSW, production SQL with its corpus filter) and hybrid (RRF with
                HNSW dense) against the same with exact dense search; queries/s one at a time and
                batched, pgvector SQL and FAISS (flat, HNSW) on the same chunk vectors.
  * "synthetic" random unit vectors (384 dims) COPYed into an UNLOGGED table `bench_vectors_<n>`,
                HNSW (m=16, ef_construction=64, cosine) built with the server's parallel workers and a
                time limit; FAISS HNSW(16, 64, inner product) on the same vectors. Then, per
                hnsw.ef_search, recall@10 against exact (numpy) search and queries/s one at a time and
                batched (50 queries in ONE statement: unnest + LATERAL), measured alternately, best of
                --reps: pgvector `sql` (as apps/corpora/search.py sends it: Django's client-side
                binding, the vector as a text literal) and `prepared` (binary parameters, a prepared
                statement), FAISS on one thread like one Postgres backend. Needs no Django: a plain
                psycopg connection to --pg-url (default: the project's database).

    .venv/bin/python benchmarks/search.py [--parts embed,corpus,synthetic] [--corpus wikipedia]
        [--sizes 100000,1000000] [--build-limit 1800] [--queries 200] [--reps 2] [--ef 40,100,...]
        [--keep] [--build-only] [--reuse] [--cache-dir DIR] [--pg-url URL] [--variants vector,halfvec,bit]
  * "variants"  index variants (benchmarks/search_variants.py: full-precision, halfvec expression index,
                binary quantization + exact re-rank) vs FAISS-HNSW at EQUAL recall, on the synthetic
                table (--sizes) and on the bundled corpus's chunk vectors (`bench_corpus_vectors`).
--build-only builds (table, index, FAISS index saved under --cache-dir) and keeps them; --reuse then
measures without rebuilding.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")
K = 10
EF_SWEEP = [40, 100, 200, 400, 1000]  # 1000 is pgvector's largest ef_search


def setup():
    import django

    django.setup()


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def recall_at_k(found: list[list[int]], truth: list[list[int]], k: int = K) -> float:
    return float(np.mean([len(set(f[:k]) & set(t[:k])) / max(1, min(k, len(t))) for f, t in zip(found, truth)]))


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    """Row indices of the k largest inner products, best first, in blocks to bound memory."""
    out = []
    for start in range(0, len(queries), 50):
        sims = queries[start:start + 50] @ base.T  # [q, N]
        part = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        out.append(np.take_along_axis(part, order, axis=1))
    return np.concatenate(out)


def timed_qps(fn, items: list, per_call: int = 1) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return round(len(items) * per_call / (time.perf_counter() - start), 1)


# ------------------------------------------------------------------ FAISS

def faiss_figures(base: np.ndarray, queries: np.ndarray, truth: np.ndarray, efs: list[int]) -> dict:
    import faiss

    faiss.omp_set_num_threads(1)
    flat = faiss.IndexFlatIP(base.shape[1])
    flat.add(base)
    singles = [queries[i:i + 1] for i in range(len(queries))]
    out = {"flat": {"recall@10": recall_at_k(flat.search(queries, K)[1].tolist(), truth.tolist()),
                    "qps_one": timed_qps(lambda q: flat.search(q, K), singles[:50]),
                    "qps_batched": timed_qps(lambda q: flat.search(q, K), [queries], len(queries))}}
    hnsw = faiss.IndexHNSWFlat(base.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 64
    faiss.omp_set_num_threads(os.cpu_count() or 1)  # build on every core, like pgvector's parallel build
    start = time.perf_counter()
    hnsw.add(base)
    faiss.omp_set_num_threads(1)
    out["hnsw_build_s"] = round(time.perf_counter() - start, 1)
    sweep = []
    for ef in efs:
        hnsw.hnsw.efSearch = ef
        found = hnsw.search(queries, K)[1].tolist()
        sweep.append({"ef_search": ef, "recall@10": round(recall_at_k(found, truth.tolist()), 4),
                      "qps_one": timed_qps(lambda q: hnsw.search(q, K), singles),
                      "qps_batched": timed_qps(lambda q: hnsw.search(q, K), [queries], len(queries))})
    out["hnsw"] = sweep
    return out


# ------------------------------------------------------------------ embedding

def bench_embed(texts: list[str], reps: int) -> dict:
    from sentence_transformers import SentenceTransformer

    from apps.corpora.embedder import get_embedder

    ours = get_embedder()
    default = SentenceTransformer(str(ours.path), device="cpu")
    ours.encode(texts[:16])
    default.encode(texts[:16])
    best = {"default": 0.0, "ours": 0.0}
    for _ in range(reps):  # alternate so the shared CPU's noise hits both
        for name, fn in (("default", lambda: default.encode(texts)), ("ours", lambda: ours.encode(texts))):
            start = time.perf_counter()
            vectors = fn()
            best[name] = max(best[name], len(texts) / (time.perf_counter() - start))
            if name == "default":
                reference = vectors
            else:
                cosine = (reference * vectors).sum(1) / np.linalg.norm(reference, axis=1)
    def neighbours(v):  # each text's 10 nearest other texts
        sims = v @ v.T
        np.fill_diagonal(sims, -2)
        return np.argsort(-sims, axis=1)[:, :K].tolist()

    overlap = recall_at_k(neighbours(vectors), neighbours(reference))
    return {"texts": len(texts), "default_texts_per_s": round(best["default"], 1), "ours_texts_per_s": round(best["ours"], 1),
            "speedup": round(best["ours"] / best["default"], 2), "min_cosine_to_default": round(float(cosine.min()), 5),
            "neighbour_overlap@10_with_default": round(overlap, 4), "precision": ours.precision,
            "threads": ours.threads, "default_threads": torch_threads(), "batch_size": ours.batch_size}


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def bench_ingest(n_docs: int) -> dict:
    """End to end into a scratch corpus (dropped afterwards)."""
    from django.db import connection

    from apps.corpora.ingest import ingest_documents
    from apps.corpora.models import Corpus
    from apps.corpora.wikipedia import wikipedia_documents

    docs = wikipedia_documents(0, n_docs)
    corpus = Corpus.objects.create(name=f"bench-ingest-{os.getpid()}")
    try:
        start = time.perf_counter()
        stats = ingest_documents(corpus, docs)
        seconds = time.perf_counter() - start
    finally:
        with connection.cursor() as cur:
            for table in ("corpora_chunk", "corpora_document"):
                cur.execute(f"DELETE FROM {table} WHERE corpus_id = %s", [corpus.pk])
            cur.execute("DELETE FROM corpora_corpus WHERE id = %s", [corpus.pk])
    return {"ingest_documents": stats.documents, "ingest_chunks": stats.chunks,
            "ingest_docs_per_s": round(stats.documents / seconds, 1), "ingest_chunks_per_s": round(stats.chunks / seconds, 1)}


# ------------------------------------------------------------------ the bundled corpus

def bench_corpus(name: str, n_queries: int) -> dict:
    from django.db import connection

    from apps.corpora.embedder import embedder_for
    from apps.corpora.models import Chunk, Corpus, Document
    from apps.corpora.models import HALFVEC_INDEX
    from apps.corpora.search import DENSE_SQL, EF_SEARCH, Hit, dense_by_vectors, fuse, lexical, vector_literal

    corpus = Corpus.objects.get(name=name)
    ids, vectors = [], []
    for chunk_id, vector in Chunk.objects.filter(corpus=corpus).values_list("id", "embedding").iterator(chunk_size=5000):
        ids.append(chunk_id)
        vectors.append(vector)
    base, ids = np.asarray(vectors, dtype=np.float32), np.asarray(ids)
    rng = np.random.default_rng(0)
    picked = rng.choice(Document.objects.filter(corpus=corpus).count(), size=n_queries, replace=False)
    docs = list(Document.objects.filter(corpus=corpus).order_by("id").values_list("title", "metadata"))
    texts = [(docs[i][1] or {}).get("description") or docs[i][0] for i in picked]  # e.g. "1968 film by Stanley Kubrick"
    embedder = embedder_for(corpus)
    queries = embedder.encode(texts)
    truth_rows = exact_topk(base, queries)
    truth = [[int(ids[j]) for j in row] for row in truth_rows]

    dense_hits = [dense_by_vectors(corpus.pk, queries[i:i + 1], K)[0] for i in range(n_queries)]
    dense_recall = recall_at_k([[h.chunk_id for h in hits] for hits in dense_hits], truth)
    pool = max(4 * K, 40)
    hnsw_pool = dense_by_vectors(corpus.pk, queries, pool)
    lexical_pool = lexical(corpus, texts, pool)
    sims = queries @ base.T
    exact_pool = []
    for qi in range(n_queries):
        order = np.argsort(-sims[qi])[:pool]
        exact_pool.append([Hit(0, int(ids[j]), "", "", float(sims[qi, j])) for j in order])
    hybrid = [[h.chunk_id for h in fuse([d, lx], K)] for d, lx in zip(hnsw_pool, lexical_pool)]
    hybrid_exact = [[h.chunk_id for h in fuse([d, lx], K)] for d, lx in zip(exact_pool, lexical_pool)]

    singles = [queries[i:i + 1] for i in range(n_queries)]
    batches = [queries[i:i + 50] for i in range(0, n_queries, 50)]
    with connection.cursor() as cur:
        cur.execute(f"SET hnsw.ef_search = {EF_SEARCH}")
        cur.execute("EXPLAIN " + DENSE_SQL, [[vector_literal(queries[0])], corpus.pk, K])  # the production statement
        plan = " ".join(r[0] for r in cur.fetchall())
    from apps.corpora.search import search_many

    record = {
        "part": "corpus", "corpus": name, "chunks": len(ids), "queries": n_queries, "ef_search": EF_SEARCH,
        "hnsw_index_used": HALFVEC_INDEX in plan, "index": HALFVEC_INDEX,
        "dense_recall@10": round(dense_recall, 4), "hybrid_recall@10": round(recall_at_k(hybrid, hybrid_exact), 4),
        "pgvector_qps_one": timed_qps(lambda q: dense_by_vectors(corpus.pk, q, K), singles),
        "pgvector_qps_batched": timed_qps(lambda q: dense_by_vectors(corpus.pk, q, K), batches, 50),
        "hybrid_qps_end_to_end_one": timed_qps(lambda t: search_many(corpus, [t], K), texts[:50]),
        "hybrid_qps_end_to_end_batched": timed_qps(lambda b: search_many(corpus, b, K), [texts[i:i + 50] for i in range(0, n_queries, 50)], 50),
        "faiss": faiss_figures(base, queries, truth_rows, [EF_SEARCH]),
    }
    return record


# ------------------------------------------------------------------ synthetic table

def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def table_name(n: int) -> str:
    return f"bench_vectors_{n}"


def connect(url: str):
    """A plain psycopg connection (autocommit) with pgvector's types: the synthetic part needs no Django."""
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(url.replace("postgis://", "postgresql://"), autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    return conn


def _stored_build(conn, table: str, n: int) -> dict | None:
    """The build figures of a complete earlier build of `table` (its COMMENT), else None."""
    row = conn.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", [table]).fetchone()
    if not row or not row[0]:
        return None
    stored = json.loads(row[0])
    return stored if stored.get("n") == n and stored.get("hnsw_built") else None


def build_table(conn, base: np.ndarray, build_limit: int, reuse: bool) -> dict:
    """COPY the vectors into an UNLOGGED table and build the HNSW index (m 16, ef_construction 64,
    cosine) with the server's parallel workers; with `reuse`, keep a complete earlier build."""
    table = table_name(len(base))
    stored = _stored_build(conn, table, len(base)) if reuse else None
    if stored:
        return {**stored, "reused_build": True}
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE UNLOGGED TABLE {table} (id int PRIMARY KEY, embedding vector(384) NOT NULL)")
    start = time.perf_counter()
    with conn.cursor() as cur, cur.copy(f"COPY {table} (id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "vector"])
        for i, vector in enumerate(base):
            copy.write_row((i, vector))
    copy_s = time.perf_counter() - start
    workers = int(conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0])
    conn.execute("SET maintenance_work_mem = '4GB'")  # the 1M graph (~2 GB) stays in memory
    conn.execute(f"SET statement_timeout = '{build_limit}s'")
    start = time.perf_counter()
    try:
        conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops) "
                     "WITH (m = 16, ef_construction = 64)")
        built = True
    except Exception as exc:  # noqa: BLE001 - the statement timeout
        built = False
        print(f"index build stopped: {exc}", file=sys.stderr)
    build_s = time.perf_counter() - start
    conn.execute("SET statement_timeout = 0")
    conn.execute(f"VACUUM ANALYZE {table}")
    heap, index = conn.execute("SELECT pg_relation_size(%s), pg_relation_size(%s)",
                               [table, f"{table}_hnsw" if built else table]).fetchone()
    record = {"n": len(base), "copy_s": round(copy_s, 1), "rows_per_s_copy": round(len(base) / copy_s),
              "hnsw_build_s": round(build_s, 1), "hnsw_built": built, "parallel_workers": workers,
              "build_load_avg": round(os.getloadavg()[0], 2), "heap_mb": heap >> 20, "index_mb": index >> 20 if built else 0}
    conn.execute(f"COMMENT ON TABLE {table} IS {psycopg_literal(json.dumps(record))}")
    return {**record, "reused_build": False}


def psycopg_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def faiss_hnsw(base: np.ndarray, cache_dir: Path | None):
    """FAISS HNSW(16, 64) inner product over `base`, built on every core (read from the cache if there)."""
    import faiss

    path = cache_dir / f"faiss_hnsw_{len(base)}.index" if cache_dir else None
    if path is not None and path.exists() and path.with_suffix(".json").exists():
        return faiss.read_index(str(path)), {**json.loads(path.with_suffix(".json").read_text()), "reused_build": True}
    hnsw = faiss.IndexHNSWFlat(base.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 64
    faiss.omp_set_num_threads(os.cpu_count() or 1)  # like pgvector's parallel build
    start = time.perf_counter()
    hnsw.add(base)
    info = {"hnsw_build_s": round(time.perf_counter() - start, 1), "build_load_avg": round(os.getloadavg()[0], 2)}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        faiss.write_index(hnsw, str(path))
        path.with_suffix(".json").write_text(json.dumps(info))
    return hnsw, {**info, "reused_build": False}


SINGLE_SQL = "SELECT id FROM {table} ORDER BY embedding <=> %s::vector LIMIT 10"
BATCH_SQL = """SELECT q.i, c.id FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, i)
CROSS JOIN LATERAL (SELECT id FROM {table} ORDER BY embedding <=> q.v LIMIT 10) c ORDER BY q.i"""


class PgSearch:
    """pgvector queries two ways on one backend: `sql` as apps/corpora/search.py sends them (Django's
    client-side binding: the vector inlined as a text literal, parsed and planned every time) and
    `prepared` (binary parameters and a prepared statement: no float parsing, no planning per query)."""

    def __init__(self, conn, table: str):
        import psycopg

        self.single, self.batch = SINGLE_SQL.format(table=table), BATCH_SQL.format(table=table)
        self.conn, self.table = conn, table
        self.client = psycopg.ClientCursor(conn)  # what Django's psycopg backend uses
        conn.execute("SET jit = off")  # as apps/corpora/search.py does

    def set_ef(self, ef: int) -> None:
        self.conn.execute(f"SET hnsw.ef_search = {int(ef)}")

    def sql_one(self, literal: str) -> list[int]:
        self.client.execute(self.single, [literal])
        return [r[0] for r in self.client.fetchall()]

    def sql_batch(self, literals: list[str]) -> None:
        self.client.execute(self.batch, [literals])
        self.client.fetchall()

    def prepared_one(self, vector: np.ndarray) -> list[int]:
        return [r[0] for r in self.conn.execute(self.single, [vector], prepare=True, binary=True).fetchall()]

    def prepared_batch(self, vectors) -> None:
        self.conn.execute(self.batch, [vectors], prepare=True, binary=True).fetchall()

    def blocks(self) -> tuple[int, int]:
        """(blocks read from outside shared_buffers, blocks found in them) of the table and its index so far."""
        self.conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, flushed at the next statement
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute("SELECT coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0), "
                                "coalesce(heap_blks_hit, 0) + coalesce(idx_blks_hit, 0) FROM pg_statio_user_tables "
                                "WHERE relname = %s", [self.table]).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def warm(self, queries: np.ndarray) -> None:
        """Pull the graph into shared_buffers: every query once at the largest ef_search."""
        self.set_ef(1000)
        for vector in queries:
            self.prepared_one(vector)

    def index_used(self, vector: np.ndarray) -> bool:
        plan = self.conn.execute("EXPLAIN " + self.single, [vector]).fetchall()
        return "_hnsw" in " ".join(r[0] for r in plan)


def side_by_side(pg: PgSearch, hnsw, queries: np.ndarray, truth: np.ndarray, efs: list[int], reps: int) -> list[dict]:
    """Per ef_search: recall@10 and queries/s of pgvector (both ways) and FAISS HNSW on one thread,
    measured alternately (best of `reps` rounds) so that the shared CPU's noise hits all of them."""
    import faiss
    from pgvector import Vector

    faiss.omp_set_num_threads(1)  # one thread, like one Postgres backend answering one statement
    literals = ["[" + ",".join(f"{x:.7g}" for x in q.tolist()) + "]" for q in queries]
    vectors = list(queries)
    batches = [(literals[i:i + 50], [Vector(v) for v in queries[i:i + 50]], queries[i:i + 50])
               for i in range(0, len(queries), 50)]
    singles = [queries[i:i + 1] for i in range(len(queries))]
    rows = []
    for ef in efs:
        pg.set_ef(ef)
        hnsw.hnsw.efSearch = ef
        found_pg = [pg.prepared_one(v) for v in vectors]  # also warms the cache
        found_sql = [pg.sql_one(lit) for lit in literals[:20]]
        found_faiss = hnsw.search(queries, K)[1].tolist()
        measures = {
            "faiss_one": lambda: timed_qps(lambda q: hnsw.search(q, K), singles),
            "pg_prepared_one": lambda: timed_qps(pg.prepared_one, vectors),
            "pg_sql_one": lambda: timed_qps(pg.sql_one, literals),
            "faiss_batched": lambda: timed_qps(lambda b: hnsw.search(b[2], K), batches, 50),
            "pg_prepared_batched": lambda: timed_qps(lambda b: pg.prepared_batch(b[1]), batches, 50),
            "pg_sql_batched": lambda: timed_qps(lambda b: pg.sql_batch(b[0]), batches, 50),
        }
        best = {name: 0.0 for name in measures}
        before = pg.blocks()
        for _ in range(reps):
            for name, fn in measures.items():
                best[name] = max(best[name], fn())
        read, hit = (after - first for after, first in zip(pg.blocks(), before))
        rows.append({"ef_search": ef, "pg_recall@10": round(recall_at_k(found_pg, truth.tolist()), 4),
                     "sql_same_results": found_sql == found_pg[:20],
                     "faiss_recall@10": round(recall_at_k(found_faiss, truth.tolist()), 4), **best,
                     "ratio_one": round(best["pg_prepared_one"] / best["faiss_one"], 3),
                     "ratio_batched": round(best["pg_prepared_batched"] / best["faiss_batched"], 3),
                     "ratio_sql_one": round(best["pg_sql_one"] / best["faiss_one"], 3),
                     "pg_blocks_read_outside_shared_buffers": read, "pg_blocks_hit": hit,
                     "load_avg": round(os.getloadavg()[0], 2)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress of a long sweep
    return rows


def bench_synthetic(url: str, n: int, n_queries: int, build_limit: int, keep: bool, reuse: bool, build_only: bool,
                    reps: int, cache_dir: Path | None, efs: list[int], warm: int = 0) -> dict:
    conn = connect(url)
    base = unit_vectors(n, 384, seed=1)
    queries = unit_vectors(n_queries, 384, seed=2)
    record = {"part": "synthetic", "n": n, "dim": 384, "queries": n_queries, "cpus": os.cpu_count(),
              "pgvector": build_table(conn, base, build_limit, reuse)}
    hnsw, record["faiss"] = faiss_hnsw(base, cache_dir)
    record["pgvector_version"] = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    for name in ("shared_buffers", "effective_cache_size", "max_parallel_maintenance_workers"):
        record[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    if record["pgvector"]["hnsw_built"] and not build_only:
        truth = exact_topk(base, queries)
        pg = PgSearch(conn, table_name(n))
        record["hnsw_index_used"] = pg.index_used(queries[0])
        if warm:
            start = time.perf_counter()
            pg.warm(unit_vectors(warm, 384, seed=3))
            record["warm"] = {"queries": warm, "seconds": round(time.perf_counter() - start, 1)}
        record["sweep"] = side_by_side(pg, hnsw, queries, truth, efs, reps)
        record["at_recall_0.95"] = next((r for r in record["sweep"] if r["pg_recall@10"] >= 0.95), None)
    if not keep:
        conn.execute(f"DROP TABLE IF EXISTS {table_name(n)}")
    record["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    conn.close()
    return record


def bench_variants(url: str, n: int, n_queries: int, names: list[str], build_limit: int, reuse: bool,
                   keep: bool, reps: int, cache_dir: Path | None, build_only: bool = False) -> dict:
    """The synthetic table (built as in bench_synthetic) with every variant's index, vs FAISS at equal recall
    (with `build_only`: build the table, the indexes and FAISS, and stop)."""
    from benchmarks.search_variants import compare, ensure_index, index_used, variants

    conn = connect(url)
    base, queries = unit_vectors(n, 384, seed=1), unit_vectors(n_queries, 384, seed=2)
    table, chosen = table_name(n), variants(384, names)
    record = {"part": "variants", "data": "random", "n": n, "queries": n_queries, "cpus": os.cpu_count(),
              "load_avg_start": [round(x, 2) for x in os.getloadavg()],
              "table": build_table(conn, base, build_limit, reuse),
              "indexes": {v.name: ensure_index(conn, table, v, build_limit) for v in chosen}}
    hnsw, record["faiss_build"] = faiss_hnsw(base, cache_dir)
    conn.execute(f"VACUUM ANALYZE {table}")
    record["index_used"] = {v.name: index_used(conn, table, v, queries[0]) for v in chosen}
    if not build_only:
        record.update(compare(conn, table, hnsw, queries, exact_topk(base, queries), chosen, reps))
    if not keep:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    record["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    conn.close()
    return record


def bench_corpus_variants(url: str, name: str, n_queries: int, names: list[str], reps: int) -> dict:
    """The same variants over the bundled corpus's real chunk vectors (copied into bench_corpus_vectors),
    queries = article descriptions as in bench_corpus; recall@10 against exact cosine search."""
    import faiss

    from apps.corpora.embedder import embedder_for
    from apps.corpora.models import Chunk, Corpus, Document
    from benchmarks.search_variants import compare, ensure_index, index_used, variants

    corpus = Corpus.objects.get(name=name)
    rows = list(Chunk.objects.filter(corpus=corpus).order_by("id").values_list("id", "embedding"))
    base = np.asarray([r[1] for r in rows], dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    docs = list(Document.objects.filter(corpus=corpus).order_by("id").values_list("title", "metadata"))
    picked = np.random.default_rng(0).choice(len(docs), size=n_queries, replace=False)
    texts = [(docs[i][1] or {}).get("description") or docs[i][0] for i in picked]
    queries = embedder_for(corpus).encode(texts).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    conn, table, chosen = connect(url), "bench_corpus_vectors", variants(384, names)
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE UNLOGGED TABLE {table} (id int PRIMARY KEY, embedding vector(384) NOT NULL)")
    with conn.cursor() as cur, cur.copy(f"COPY {table} (id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "vector"])
        for i, vector in enumerate(base):
            copy.write_row((i, vector))
    record = {"part": "variants", "data": "corpus", "corpus": name, "n": len(base), "queries": n_queries,
              "load_avg_start": [round(x, 2) for x in os.getloadavg()],
              "indexes": {v.name: ensure_index(conn, table, v, 3600) for v in chosen}}
    conn.execute(f"VACUUM ANALYZE {table}")
    hnsw = faiss.IndexHNSWFlat(384, 16, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 64
    hnsw.add(base)
    record["index_used"] = {v.name: index_used(conn, table, v, queries[0]) for v in chosen}
    record.update(compare(conn, table, hnsw, queries, exact_topk(base, queries), chosen, reps))
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    record["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    conn.close()
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="embed,corpus,synthetic",
                        help="comma list of embed, corpus, synthetic, variants")
    parser.add_argument("--variants", default="vector,halfvec,bit",
                        help="variants part: index variants (benchmarks/search_variants.py)")
    parser.add_argument("--variant-data", default="random,corpus", help="variants part: random and/or corpus")
    parser.add_argument("--corpus", default="wikipedia", help="loaded bundled corpus (manage.py load_wikipedia)")
    parser.add_argument("--sizes", default="100000", help="synthetic table sizes, comma separated (e.g. 100000,1000000)")
    parser.add_argument("--build-limit", type=int, default=1800, help="seconds allowed for one HNSW build")
    parser.add_argument("--queries", type=int, default=200, help="queries per measurement")
    parser.add_argument("--ef", default=",".join(map(str, EF_SWEEP)), help="synthetic: hnsw.ef_search values")
    parser.add_argument("--embed-texts", type=int, default=256, help="texts for the embedding comparison")
    parser.add_argument("--ingest-docs", type=int, default=300, help="documents for the end-to-end ingest figure")
    parser.add_argument("--reps", type=int, default=2, help="alternating repetitions (best kept)")
    parser.add_argument("--keep", action="store_true", help="keep the bench_vectors_<n> tables")
    parser.add_argument("--reuse", action="store_true",
                        help="synthetic: reuse a kept table and the FAISS index cached in --cache-dir (no rebuild)")
    parser.add_argument("--build-only", action="store_true", help="synthetic: build (table, index, FAISS) and stop")
    parser.add_argument("--cache-dir", default="", help="synthetic: folder for built FAISS indexes "
                        "(default $SELFPLAY_DATA_DIR/bench; 'none' for no cache)")
    parser.add_argument("--warm", type=int, default=0, help="synthetic: first run this many other random "
                        "queries at ef_search 1000 (pulls the graph into shared_buffers)")
    parser.add_argument("--pg-url", default="", help="synthetic: the Postgres to use (default: the project's, "
                        "DATABASE_URL or the embedded server)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if parts & {"embed", "corpus"} or ("variants" in parts and "corpus" in args.variant_data):
        setup()
    if "embed" in parts:
        from apps.corpora.chunking import chunk_text
        from apps.corpora.embedder import get_embedder
        from apps.corpora.wikipedia import wikipedia_documents

        tokenizer = get_embedder().tokenizer
        texts = [f"{d.title}\n{s.text}" for d in wikipedia_documents(2000, args.embed_texts) for s in chunk_text(tokenizer, d.text)]
        emit({"part": "embed", **bench_embed(texts[:args.embed_texts], args.reps), **bench_ingest(args.ingest_docs)})
    if "corpus" in parts:
        emit(bench_corpus(args.corpus, args.queries))
    if "variants" in parts:
        from selfplay_web import config

        cache = None if args.cache_dir == "none" else Path(args.cache_dir or config.data_dir() / "bench")
        names = [v for v in args.variants.split(",") if v]
        url = args.pg_url or config.database_url()
        if "random" in args.variant_data:
            for n in [int(s) for s in args.sizes.split(",") if s]:
                emit(bench_variants(url, n, args.queries, names, args.build_limit, args.reuse, args.keep,
                                    args.reps, cache, args.build_only))
        if "corpus" in args.variant_data:
            emit(bench_corpus_variants(url, args.corpus, args.queries, names, args.reps))
    if "synthetic" in parts:
        from selfplay_web import config

        cache = None if args.cache_dir == "none" else Path(args.cache_dir or config.data_dir() / "bench")
        efs = [int(e) for e in args.ef.split(",") if e]
        for n in [int(s) for s in args.sizes.split(",") if s]:
            emit(bench_synthetic(args.pg_url or config.database_url(), n, args.queries, args.build_limit,
                                 args.keep or args.build_only, args.reuse, args.build_only, args.reps, cache, efs,
                                 args.warm))


if __name__ == "__main__":
    main()
