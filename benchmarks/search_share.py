"""Search's share of an SSP step and of a SPICE step at the papers' batch (issue 22 item 4).

Against the embedded Postgres (the product's tables, indexes and SQL), with the bundled Wikipedia
corpus (`manage.py load_wikipedia`, 10,033 articles -> 10,324 chunks) plus N synthetic rows
(default 1,000,000) added to the SAME corpus: a paper-scale corpus (SSP searches a Wikipedia dump
of 21M passages) is one corpus the run searches, so every search and every document draw runs over
all 1.01M rows, through the one HNSW index (`corpora_chunk_halfvec_hnsw`) and the one GIN index.
A synthetic row is a Document with one Chunk: a random unit vector (seed 1, as benchmarks/search.py)
and, as text, the words of a bundled article summary (row j: summary j mod 10,033) in a random
order, so the lexical side sees the corpus's real word frequencies (each word in ~100x as many
rows, as in a corpus 100x larger) while the text is no real article.

    .venv/bin/python benchmarks/search_share.py build [--rows 1000000]     # once: COPY + indexes
    .venv/bin/python benchmarks/search_share.py measure [--reps 3] [--step-ssp S]

`build` drops the chunk table's HNSW and GIN indexes, COPYs the synthetic documents and chunks, and
builds both indexes again with their migration's definitions (CREATE INDEX CONCURRENTLY, so a
`load_wikipedia` running at the same time keeps inserting); it is idempotent (rows already there
are not added again; missing indexes are built).

`measure` prints one table and one JSON line:
- SSP: 256 trajectories x 10 searches, issued as multi_turn_rollout issues them: one
  `SearchTool.search` (one `PgvectorRetriever.search`) per turn with that turn's 256 queries, top_k
  3 (ssp.top_k), the web's retriever in its default mode (dense: query embedding + HNSW), on one
  connection and on `search_workers()` connections (the retriever's slices), alternating; plus the
  hybrid mode (dense + lexical, RRF; the search page's) timed on a sample of queries and
  extrapolated, since its lexical half takes seconds per query at this size. Queries are distinct,
  short search strings built from the corpus (see `ssp_queries`).
- SPICE: `PgDocumentSource.sample(128, rng)` with the documents' text, as spice.py draws a step's
  documents.
Each with the load average, since this 2-core machine is shared.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")

SYNTH_SOURCE = "synthetic:"
INDEXES = ("corpora_chunk_halfvec_hnsw", "corpora_chunk_tsv_gin")


def setup():
    import django

    django.setup()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


# ---- build --------------------------------------------------------------------------------------

def index_definitions() -> dict[str, str]:
    """The chunk table's HNSW and GIN index definitions, as the migrations create them."""
    from django.db import connection
    from apps.corpora.models import Chunk

    with connection.schema_editor(collect_sql=True, atomic=False) as editor:
        sql = {idx.name: str(idx.create_sql(Chunk, editor)) for idx in Chunk._meta.indexes if idx.name in INDEXES}
    return sql


def existing_indexes() -> set[str]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'corpora_chunk'")
        return {r[0] for r in cur.fetchall()}


def build(corpus_name: str, rows: int, batch: int = 50_000) -> dict:
    from django.db import connection
    from pgvector.psycopg import register_vector

    from apps.corpora.models import Corpus, Document
    from apps.corpora.uploads import create_corpus
    from apps.corpora.wikipedia import load_summaries

    out: dict = {"part": "build", "rows": rows, "load_start": load()}
    corpus = Corpus.objects.filter(name=corpus_name).first() or create_corpus(corpus_name, "bundled + synthetic")
    have = Document.objects.filter(corpus=corpus, source__startswith=SYNTH_SOURCE).count()
    out["synthetic_before"] = have
    defs = index_definitions()
    if have < rows:
        with connection.cursor() as cur:
            for name in INDEXES:  # built once after the COPY: one build is far cheaper than 1M inserts
                cur.execute(f"DROP INDEX IF EXISTS {name}")
        summaries = [r["extract"].split() for r in load_summaries()]
        vectors = unit_vectors(rows, 384, seed=1)
        rng = random.Random(1)
        raw = connection.connection
        register_vector(raw)
        started = time.perf_counter()
        for lo in range(have, rows, batch):
            hi = min(rows, lo + batch)
            texts = []
            for j in range(lo, hi):
                words = list(summaries[j % len(summaries)])
                rng.shuffle(words)
                texts.append(" ".join(words))
            with raw.transaction(), raw.cursor() as cur:
                cur.execute("SELECT coalesce(max(id), 0) FROM corpora_document")
                top = cur.fetchone()[0]
                with cur.copy("COPY corpora_document (corpus_id, title, source, content_hash, metadata, text, "
                              "created_at) FROM STDIN") as copy:
                    for j, text in zip(range(lo, hi), texts):
                        copy.write_row((corpus.pk, f"Synthetic {j}", f"{SYNTH_SOURCE}{j}",
                                        hashlib.sha256(f"{SYNTH_SOURCE}{j}".encode()).hexdigest(), "{}", text,
                                        "now"))
                cur.execute("SELECT id FROM corpora_document WHERE id > %s AND corpus_id = %s AND source LIKE %s "
                            "ORDER BY id", (top, corpus.pk, SYNTH_SOURCE + "%"))
                ids = [r[0] for r in cur.fetchall()]
                assert len(ids) == hi - lo, (len(ids), hi - lo)
                with cur.copy("COPY corpora_chunk (document_id, corpus_id, ordinal, text, token_start, token_end, "
                              "embedding) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["int8", "int8", "int4", "text", "int4", "int4", "vector"])
                    for doc_id, j, text in zip(ids, range(lo, hi), texts):  # ids ascend with j (one COPY)
                        copy.write_row((doc_id, corpus.pk, 0, text, 0, len(text.split()), vectors[j]))
            print(f"  {hi:,} rows, {time.perf_counter() - started:.0f} s, load {load()}", file=sys.stderr, flush=True)
        out["copy_s"] = round(time.perf_counter() - started, 1)
    missing = [name for name in INDEXES if name not in existing_indexes()]
    with connection.cursor() as cur:
        for name in missing:
            sql = defs[name].replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1)
            started = time.perf_counter()
            print(f"  building {name}: {sql}", file=sys.stderr, flush=True)
            cur.execute(sql)
            out[f"{name}_build_s"] = round(time.perf_counter() - started, 1)
            out[f"{name}_load"] = load()
        cur.execute("VACUUM ANALYZE corpora_chunk")
        cur.execute("VACUUM ANALYZE corpora_document")
        cur.execute("SELECT pg_relation_size('corpora_chunk_halfvec_hnsw'), pg_relation_size('corpora_chunk_tsv_gin'),"
                    " pg_total_relation_size('corpora_chunk'), pg_total_relation_size('corpora_document')")
        sizes = cur.fetchone()
    out["sizes_mb"] = dict(zip(["hnsw", "gin", "chunk_total", "document_total"], [s >> 20 for s in sizes]))
    corpus.refresh_counts()
    out["documents"], out["chunks"] = corpus.doc_count, corpus.chunk_count
    out["load_end"] = load()
    return out


# ---- measure ------------------------------------------------------------------------------------

SSP_TRAJECTORIES, SSP_TURNS, SSP_TOP_K = 256, 10, 3  # the paper's batch; ssp.max_turns 10, ssp.top_k 3
SPICE_DOCUMENTS = 128
STEPS = {"GRPO (RESULTS.md, H100)": 6.1, "SPICE (issue 22, H100)": 62.7}


def ssp_queries(trajectories: int = SSP_TRAJECTORIES, turns: int = SSP_TURNS, seed: int = 0) -> list[list[str]]:
    """turns x trajectories distinct search strings, as a Proposer / Solver writes them: the answer's
    title, its description, then short spans (3-8 words) of its article, one per turn."""
    from apps.corpora.wikipedia import load_summaries

    rows = load_summaries()
    rng = random.Random(seed)
    seen: set[str] = set()
    by_turn: list[list[str]] = [[] for _ in range(turns)]
    for row in rng.sample(rows, trajectories):
        words = row["extract"].split()
        asked = [row.get("title") or "", row.get("description") or ""]
        while len(asked) < turns + 8:
            n = rng.randint(3, 8)
            at = rng.randrange(max(1, len(words) - n))
            asked.append(" ".join(words[at:at + n]))
        picked = []
        for q in asked:
            q = q.strip()
            if q and q not in seen and len(picked) < turns:
                seen.add(q)
                picked.append(q)
        while len(picked) < turns:  # a very short article: number its title
            picked.append(f"{row.get('title')} {len(picked)}")
        for t, q in enumerate(picked):
            by_turn[t].append(q)
    return by_turn


def backend_cpu_s() -> float:
    """CPU seconds of this connection's Postgres backend (/proc: same machine): with the client's
    process_time it is the search's CPU cost, which the other jobs on a shared machine do not inflate."""
    from django.db import connection

    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def measure_ssp(corpus, by_turn: list[list[str]], workers: int, split: bool, mode: str = "dense",
                top_k: int = SSP_TOP_K) -> dict:
    """One SSP step's searches as multi_turn_rollout issues them (one SearchTool.search per turn) with
    the retriever's batch spread over `workers` connections; with `split`, the same turn batches again
    in their parts (query embedding, dense SQL, lexical SQL), one connection. CPU seconds (client +
    Postgres backend) are counted with one connection only (the slices' backends are gone when read)."""
    from apps.corpora import search as S
    from apps.corpora.embedder import embedder_for
    from apps.corpora.retriever import PgvectorRetriever
    from trainer.tools.search import SearchTool

    tool = SearchTool(PgvectorRetriever(corpus, mode=mode, workers=workers), k=top_k)
    load_before = load()
    per_turn = []
    cpu, pg = time.process_time(), backend_cpu_s()
    started = time.perf_counter()
    for queries in by_turn:
        s, results = timed(tool.search, queries)
        per_turn.append(round(s, 3))
        assert len(results) == len(queries) and all(len(r) == top_k for r in results), "a search found too little"
        for passages in results:
            tool.format(passages)
    step = time.perf_counter() - started
    client_cpu, pg_cpu = time.process_time() - cpu, backend_cpu_s() - pg
    out = {"mode": mode, "workers": workers, "queries": sum(map(len, by_turn)), "turns": len(by_turn), "top_k": top_k,
           "step_s": round(step, 2), "per_turn_s": per_turn, "load_before": load_before}
    if workers == 1:
        out.update(client_cpu_s=round(client_cpu, 2), postgres_cpu_s=round(pg_cpu, 2),
                   cpu_s=round(client_cpu + pg_cpu, 2))
    if not split:
        out["load_after"] = load()
        return out
    pool = max(4 * top_k, 40) if mode == "hybrid" else top_k  # search_many's pool per half
    embed_s = dense_s = lexical_s = 0.0
    embedder = embedder_for(corpus)
    for queries in by_turn:
        s, vectors = timed(embedder.encode, queries)
        embed_s += s
        dense_s += timed(S.dense_by_vectors, corpus.pk, vectors, pool)[0]
        if mode == "hybrid":
            lexical_s += timed(S.lexical, corpus, queries, pool)[0]
    out.update(embed_s=round(embed_s, 2), dense_sql_s=round(dense_s, 2), lexical_sql_s=round(lexical_s, 2),
               load_after=load())
    return out


def measure_hybrid_sample(corpus, by_turn: list[list[str]], per_turn: int, top_k: int = SSP_TOP_K) -> dict:
    """Hybrid (the search page's mode; the retriever's until issue 22) on `per_turn` queries of each turn, one statement per query
    and half: its lexical half ranks every row holding any query word (~10% of 1M rows), seconds per
    query, so a whole step is extrapolated: seconds per query x the step's queries."""
    from apps.corpora import search as S
    from apps.corpora.embedder import embedder_for

    pool = max(4 * top_k, 40)
    embedder = embedder_for(corpus)
    load_before = load()
    embed, dense, lexical = [], [], []
    for queries in by_turn:
        for q in queries[:per_turn]:
            s, vectors = timed(embedder.encode, [q])
            embed.append(s)
            dense.append(timed(S.dense_by_vectors, corpus.pk, vectors, pool)[0])
            lexical.append(timed(S.lexical, corpus, [q], pool)[0])
    n = sum(map(len, by_turn))
    return {"mode": "hybrid", "sampled_queries": len(lexical), "lexical_s_per_query_mean": round(float(np.mean(lexical)), 3),
            "lexical_s_per_query_max": round(max(lexical), 3),
            "dense_s_per_query_mean": round(float(np.mean(dense)), 4),
            "embed_s_per_query_mean": round(float(np.mean(embed)), 4),
            "step_s_extrapolated": round(n * float(np.mean(lexical) + np.mean(dense)), 1),
            "load_before": load_before, "load_after": load()}


def old_sample(corpus, n: int, rng) -> list:
    """PgDocumentSource.sample before this change (every id of the corpus read per call), for comparison."""
    from apps.corpora.models import Document as DocumentRow
    from trainer.tools import Document

    ids = list(DocumentRow.objects.filter(corpus=corpus).order_by("id").values_list("id", flat=True))
    chosen = rng.sample(ids, n)
    rows = {d.id: d for d in DocumentRow.objects.filter(id__in=chosen).only("id", "title", "text")}
    return [Document(id=str(i), title=rows[i].title, text=rows[i].text) for i in chosen]


def measure_spice(corpus, steps: int, n: int = SPICE_DOCUMENTS) -> dict:
    from apps.corpora.retriever import PgDocumentSource

    load_before = load()
    source = PgDocumentSource(corpus)
    first, docs = timed(source.sample, n, random.Random(0))
    assert len(docs) == n and all(d.text for d in docs)
    later = [timed(source.sample, n, random.Random(step))[0] for step in range(1, steps + 1)]
    before = [timed(old_sample, corpus, n, random.Random(step))[0] for step in range(1, min(steps, 3) + 1)]
    return {"documents": n, "first_call_s": round(first, 3), "step_s": round(float(np.median(later)), 4),
            "step_s_max": round(max(later), 4), "id_reads": source.id_reads,
            "before_fix_step_s": round(float(np.median(before)), 3), "corpus_documents": len(source),
            "load_before": load_before, "load_after": load()}


def plans(corpus, query: str, pool: int) -> dict:
    """EXPLAIN of the dense and lexical statements for one query: which index each uses."""
    from django.db import connection

    from apps.corpora import search as S
    from apps.corpora.embedder import embedder_for

    vector = embedder_for(corpus).encode([query])[0]
    out = {}
    with connection.cursor() as cur:
        S._vector_settings(cur, max(S.EF_SEARCH, 2 * pool))
        cur.execute("EXPLAIN " + S.DENSE_SQL, [[S.vector_literal(vector)], corpus.pk, pool])
        out["dense"] = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("EXPLAIN " + S.LEXICAL_SQL, [[query], corpus.pk, pool])
        out["lexical"] = "\n".join(r[0] for r in cur.fetchall())
    return out


def share_table(out: dict, step_ssp: float | None) -> str:
    """Search seconds per step and their share of a step whose other parts take T seconds: s / (T + s).
    T: GRPO 6.1 s and SPICE 62.7 s (H100, for scale), and the SSP step's when measured (--step-ssp)."""
    ssp_one, ssp, spice = out["ssp_one"], out["ssp"], out["spice"]
    hybrid = out["ssp_hybrid"]
    rows = [(f"SSP, 10 turns x 256 queries, hybrid, 1 connection: extrapolated from "
             f"{hybrid['sampled_queries']} queries", hybrid["step_s_extrapolated"]),
            (f"SSP, 10 turns x 256 queries, dense, 1 connection (wall; load {ssp_one['load_before'][0]})",
             ssp_one["step_s"]),
            ("SSP, dense, CPU seconds (client + Postgres, 1 connection)", ssp_one.get("cpu_s")),
            (f"SSP, dense, {ssp['workers']} connections (wall; load {ssp['load_before'][0]})", ssp["step_s"]),
            ("SPICE, 128 documents drawn, before (every id read per draw)", spice["before_fix_step_s"]),
            (f"SPICE, 128 documents drawn, ids kept (load {spice['load_before'][0]})", spice["step_s"])]
    lines = ["| search per step | s | share of GRPO 6.1 s | share of SPICE 62.7 s | share of SSP step T |",
             "| --- | --- | --- | --- | --- |"]
    for name, s in rows:
        if s is None:
            continue
        cells = [f"{100 * s / (t + s):.2f}%" for t in STEPS.values()]
        cells.append(f"{100 * s / (step_ssp + s):.2f}%" if step_ssp else f"100 x {s:.2f} / (T + {s:.2f})")
        lines.append(f"| {name} | {s:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure(corpus_name: str, reps: int, step_ssp: float | None, spice_steps: int, hybrid_sample: int) -> dict:
    from apps.corpora.models import Corpus

    corpus = Corpus.objects.get(name=corpus_name)
    by_turn = ssp_queries()
    out = {"part": "measure", "corpus": corpus_name, "chunks": corpus.chunk_count, "documents": corpus.doc_count,
           "cpus": os.cpu_count(), "load_start": load()}
    out["plans"] = plans(corpus, by_turn[1][0], 40)
    from apps.corpora.retriever import search_workers

    many = search_workers()
    runs = []
    for rep in range(reps):  # alternating: one connection, then the batch spread over `many`
        runs.append(measure_ssp(corpus, by_turn, 1, split=rep == 0))
        if many > 1:
            runs.append(measure_ssp(corpus, by_turn, many, split=False))
    out["ssp_runs"] = runs
    out["ssp_one"] = min((r for r in runs if r["workers"] == 1), key=lambda r: r["step_s"])
    out["ssp"] = min(runs, key=lambda r: r["step_s"])
    out["ssp_hybrid"] = measure_hybrid_sample(corpus, by_turn, hybrid_sample)
    out["spice"] = measure_spice(corpus, spice_steps)
    out["load_end"] = load()
    print(share_table(out, step_ssp), file=sys.stderr)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--corpus", default="wikipedia")
    b.add_argument("--rows", type=int, default=1_000_000)
    m = sub.add_parser("measure")
    m.add_argument("--corpus", default="wikipedia")
    m.add_argument("--reps", type=int, default=2, help="SSP steps measured (the fastest is reported)")
    m.add_argument("--spice-steps", type=int, default=10)
    m.add_argument("--hybrid-sample", type=int, default=4, help="hybrid queries timed per turn (extrapolated)")
    m.add_argument("--step-ssp", type=float, default=None, help="the SSP step's H100 seconds, when measured")
    args = parser.parse_args()
    setup()
    if args.cmd == "build":
        print(json.dumps(build(args.corpus, args.rows)), flush=True)
    else:
        print(json.dumps(measure(args.corpus, args.reps, args.step_ssp, args.spice_steps, args.hybrid_sample)), flush=True)


if __name__ == "__main__":
    main()
