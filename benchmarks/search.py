"""Search and ingestion benchmark for apps/corpora: pgvector (our SQL) vs FAISS, ours vs default encode.

Prints one JSON line per part:
  * "embed"     ingestion embedding throughput: our Embedder.encode vs SentenceTransformer.encode
                (defaults: fp32, batch 32) on the same chunk texts, alternating runs, best of --reps;
                plus end-to-end ingest (parse -> chunk -> embed -> COPY) documents/s.
  * "corpus"    the bundled Wikipedia corpus (--corpus, loaded by `manage.py load_wikipedia`):
                recall@10 of dense (HNSW, production SQL with its corpus filter) and hybrid (RRF with
                HNSW dense) against the same with exact dense search; queries/s one at a time and
                batched, pgvector SQL and FAISS (flat, HNSW) on the same chunk vectors.
  * "synthetic" random unit vectors (384 dims) COPYed into a separate table `bench_vectors`, HNSW
                (m=16, ef_construction=64, cosine) built with a time limit; recall@10 vs exact and
                queries/s over an ef_search sweep, FAISS flat and HNSW(16, 64) on the same vectors.
FAISS runs on one thread, like one Postgres backend answering one statement.

    .venv/bin/python benchmarks/search.py [--parts embed,corpus,synthetic] [--corpus wikipedia]
        [--sizes 100000,1000000] [--build-limit 900] [--queries 200] [--reps 2] [--keep]
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
    from apps.corpora.search import EF_SEARCH, Hit, dense_by_vectors, fuse, lexical

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
        cur.execute("EXPLAIN SELECT id FROM corpora_chunk WHERE corpus_id = %s ORDER BY embedding <=> %s::vector LIMIT 10",
                    [corpus.pk, "[" + ",".join(map(str, queries[0].tolist())) + "]"])
        plan = " ".join(r[0] for r in cur.fetchall())
    from apps.corpora.search import search_many

    record = {
        "part": "corpus", "corpus": name, "chunks": len(ids), "queries": n_queries, "ef_search": EF_SEARCH,
        "hnsw_index_used": "corpora_chunk_embedding_hnsw" in plan,
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


def build_table(base: np.ndarray, build_limit: int) -> dict:
    from django.db import connection
    from pgvector.psycopg import register_vector

    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bench_vectors")
        cur.execute("CREATE UNLOGGED TABLE bench_vectors (id int PRIMARY KEY, embedding vector(384) NOT NULL)")
    register_vector(connection.connection)
    start = time.perf_counter()
    with connection.cursor() as cur, cur.cursor.copy("COPY bench_vectors (id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "vector"])
        for i, vector in enumerate(base):
            copy.write_row((i, vector))
    copy_s = time.perf_counter() - start
    with connection.cursor() as cur:
        cur.execute("SET maintenance_work_mem = '4GB'")
        cur.execute(f"SET max_parallel_maintenance_workers = {max(0, (os.cpu_count() or 1) - 1)}")
        cur.execute(f"SET statement_timeout = '{build_limit}s'")
        start = time.perf_counter()
        try:
            cur.execute("CREATE INDEX bench_vectors_hnsw ON bench_vectors USING hnsw (embedding vector_cosine_ops) "
                        "WITH (m = 16, ef_construction = 64)")
            built = True
        except Exception as exc:  # noqa: BLE001 - the statement timeout
            built = False
            print(f"index build stopped: {exc}", file=sys.stderr)
        build_s = time.perf_counter() - start
        cur.execute("SET statement_timeout = 0")
    return {"copy_s": round(copy_s, 1), "rows_per_s_copy": round(len(base) / copy_s), "hnsw_build_s": round(build_s, 1),
            "hnsw_built": built}


SINGLE_SQL = "SELECT id FROM bench_vectors ORDER BY embedding <=> %s::vector LIMIT 10"
BATCH_SQL = """SELECT q.i, c.id FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, i)
CROSS JOIN LATERAL (SELECT id FROM bench_vectors ORDER BY embedding <=> q.v LIMIT 10) c ORDER BY q.i"""


def pg_sweep(queries: np.ndarray, truth: np.ndarray, efs: list[int]) -> list[dict]:
    from django.db import connection

    literals = ["[" + ",".join(f"{x:.7g}" for x in q.tolist()) + "]" for q in queries]
    out = []
    with connection.cursor() as cur:
        cur.execute("SET jit = off")  # as apps/corpora/search.py does
        for ef in efs:
            cur.execute(f"SET hnsw.ef_search = {ef}")
            found = []

            def one(lit):
                cur.execute(SINGLE_SQL, [lit])
                found.append([r[0] for r in cur.fetchall()])

            qps_one = timed_qps(one, literals)

            def batch(lits):
                cur.execute(BATCH_SQL, [lits])
                cur.fetchall()

            qps_batched = timed_qps(batch, [literals[i:i + 50] for i in range(0, len(literals), 50)], 50)
            out.append({"ef_search": ef, "recall@10": round(recall_at_k(found, truth.tolist()), 4),
                        "qps_one": qps_one, "qps_batched": qps_batched})
    return out


def at_target(sweep: list[dict], target: float = 0.95) -> dict | None:
    return next((row for row in sweep if row["recall@10"] >= target), None)


def bench_synthetic(n: int, n_queries: int, build_limit: int, keep: bool) -> dict:
    from django.db import connection

    base = unit_vectors(n, 384, seed=1)
    queries = unit_vectors(n_queries, 384, seed=2)
    truth = exact_topk(base, queries)
    record = {"part": "synthetic", "n": n, "dim": 384, "queries": n_queries, **build_table(base, build_limit)}
    if record["hnsw_built"]:
        with connection.cursor() as cur:
            cur.execute("EXPLAIN " + SINGLE_SQL, ["[" + ",".join(["0.05"] * 384) + "]"])
            record["hnsw_index_used"] = "bench_vectors_hnsw" in " ".join(r[0] for r in cur.fetchall())
        record["pgvector"] = pg_sweep(queries, truth, EF_SWEEP)
    record["faiss"] = faiss_figures(base, queries, truth, EF_SWEEP)
    if record["hnsw_built"]:
        pg = at_target(record["pgvector"])
        fa = at_target(record["faiss"]["hnsw"])
        same_ef = {r["ef_search"]: r for r in record["faiss"]["hnsw"]}
        record["pgvector_vs_faiss_hnsw_qps_one_same_ef"] = {
            r["ef_search"]: round(r["qps_one"] / same_ef[r["ef_search"]]["qps_one"], 3) for r in record["pgvector"]}
        if pg and fa:
            record["at_recall_0.95"] = {"pgvector_ef": pg["ef_search"], "faiss_ef": fa["ef_search"],
                                        "qps_one_ratio": round(pg["qps_one"] / fa["qps_one"], 3),
                                        "qps_batched_ratio": round(pg["qps_batched"] / fa["qps_batched"], 3)}
    if not keep:
        with connection.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS bench_vectors")
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="embed,corpus,synthetic", help="comma list of embed, corpus, synthetic")
    parser.add_argument("--corpus", default="wikipedia", help="loaded bundled corpus (manage.py load_wikipedia)")
    parser.add_argument("--sizes", default="100000", help="synthetic table sizes, comma separated (e.g. 100000,1000000)")
    parser.add_argument("--build-limit", type=int, default=900, help="seconds allowed for one HNSW build")
    parser.add_argument("--queries", type=int, default=200, help="queries per measurement")
    parser.add_argument("--embed-texts", type=int, default=256, help="texts for the embedding comparison")
    parser.add_argument("--ingest-docs", type=int, default=300, help="documents for the end-to-end ingest figure")
    parser.add_argument("--reps", type=int, default=2, help="alternating repetitions (best kept)")
    parser.add_argument("--keep", action="store_true", help="keep the bench_vectors table")
    args = parser.parse_args()
    setup()
    parts = set(args.parts.split(","))
    if "embed" in parts:
        from apps.corpora.chunking import chunk_text
        from apps.corpora.embedder import get_embedder
        from apps.corpora.wikipedia import wikipedia_documents

        tokenizer = get_embedder().tokenizer
        texts = [f"{d.title}\n{s.text}" for d in wikipedia_documents(2000, args.embed_texts) for s in chunk_text(tokenizer, d.text)]
        emit({"part": "embed", **bench_embed(texts[:args.embed_texts], args.reps), **bench_ingest(args.ingest_docs)})
    if "corpus" in parts:
        emit(bench_corpus(args.corpus, args.queries))
    if "synthetic" in parts:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            emit(bench_synthetic(n, args.queries, args.build_limit, args.keep))


if __name__ == "__main__":
    main()
