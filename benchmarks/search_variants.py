"""pgvector index variants vs FAISS-HNSW(16, 64) at equal recall (issue #3), used by benchmarks/search.py.

The same vectors get several HNSW indexes (all m 16, ef_construction 64 unless named otherwise):
  * `vector`   the column itself, `vector_cosine_ops` (the product's index before this work);
  * `halfvec`  an expression index on `embedding::halfvec(384)`, `halfvec_cosine_ops`: half the bytes
               per element; the query orders by the same cast, so the top 10 are by 16-bit cosine;
  * `halfvec_m8` the same with m 8, ef_construction 32 (on `l2_normalize(embedding)::halfvec`, the same
               vectors for unit-length input, so that its index and `halfvec`'s are never confused);
  * `bit`      an expression index on `binary_quantize(embedding)::bit(384)`, `bit_hamming_ops` (48 bytes
               per element), and ONE statement that takes the `candidates` nearest by Hamming distance
               from it and re-ranks them by full-precision cosine (`ORDER BY embedding <=> q LIMIT 10`).
Each variant runs over a list of knobs (hnsw.ef_search, and for `bit` the number of re-ranked candidates;
above 1000, pgvector's largest ef_search, the scan continues with `hnsw.iterative_scan`). For every
point: recall@10 against exact search and queries/s one query per statement (binary parameters,
prepared), measured alternately with FAISS HNSW on one thread over an ef_search curve, best of `reps`
rounds; also per CPU second the search used (client process + Postgres backend, from /proc: the 2
shared cores' load does not count). FAISS's queries/s at the variant's recall is interpolated (log q/s linear in recall) between
the two FAISS points around it: `ratio_equal_recall` = pgvector q/s / that. A recall below FAISS's
lowest point is compared with that point (FAISS is faster AND finds more there: the ratio flatters
pgvector and the row says `below_faiss_range`); one above FAISS's best recall with FAISS's best point.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

K = 10
FAISS_EFS = [10, 16, 24, 40, 70, 100, 200, 400, 1000, 2000, 4000]
HALF = "(embedding::halfvec({dim}))"
HALF_M8 = "(l2_normalize(embedding)::halfvec({dim}))"  # another expression, so the planner cannot swap the two indexes
BIT = "(binary_quantize(embedding)::bit({dim}))"


@dataclass
class Variant:
    name: str
    index: str            # CREATE INDEX body after `ON {table} USING hnsw `
    query: str            # one query; %(q)s is the query vector, %(n)s the candidates
    knobs: list[tuple[int, int]] = field(default_factory=list)  # (ef_search, candidates)
    m: int = 16
    ef_construction: int = 64

    def index_name(self, table: str) -> str:
        return f"{table}_hnsw" if self.name == "vector" else f"{table}_{self.name}_hnsw"


def variants(dim: int, names: list[str]) -> list[Variant]:
    half, half_m8, bit = HALF.format(dim=dim), HALF_M8.format(dim=dim), BIT.format(dim=dim)
    efs = [(ef, K) for ef in (10, 20, 40, 100, 200, 400, 1000)]
    known = {
        "vector": Variant("vector", "(embedding vector_cosine_ops)",
                          "SELECT id FROM {t} ORDER BY embedding <=> %(q)s LIMIT 10", efs),
        "halfvec": Variant("halfvec", f"({half} halfvec_cosine_ops)",
                           f"SELECT id FROM {{t}} ORDER BY {half} <=> %(q)s::halfvec({dim}) LIMIT 10", efs),
        "halfvec_m8": Variant("halfvec_m8", f"({half_m8} halfvec_cosine_ops)",
                              f"SELECT id FROM {{t}} ORDER BY {half_m8} <=> %(q)s::halfvec({dim}) LIMIT 10", efs,
                              m=8, ef_construction=32),
        "bit": Variant("bit", f"({bit} bit_hamming_ops)",
                       f"SELECT id FROM (SELECT id, embedding FROM {{t}} ORDER BY {bit} <~> binary_quantize(%(q)s) "
                       f"LIMIT %(n)s) c ORDER BY embedding <=> %(q)s LIMIT 10",
                       [(min(n, 1000), n) for n in (20, 40, 100, 200, 400, 1000, 2000, 4000)]),
    }
    unknown = set(names) - set(known)
    if unknown:
        raise SystemExit(f"unknown variant(s) {sorted(unknown)}: choose from {', '.join(known)}")
    return [known[n] for n in names]


def ensure_index(conn, table: str, variant: Variant, build_limit: int) -> dict:
    """Build the variant's index on `table` unless it is there; its build seconds and size."""
    name = variant.index_name(table)
    if conn.execute("SELECT to_regclass(%s)", [name]).fetchone()[0] is None:
        conn.execute("SET maintenance_work_mem = '2GB'")
        conn.execute(f"SET statement_timeout = '{build_limit}s'")
        start = time.perf_counter()
        conn.execute(f"CREATE INDEX {name} ON {table} USING hnsw {variant.index} "
                     f"WITH (m = {variant.m}, ef_construction = {variant.ef_construction})")
        conn.execute("SET statement_timeout = 0")
        built = {"build_s": round(time.perf_counter() - start, 1), "build_load_avg": round(os.getloadavg()[0], 2)}
    else:
        built = {"reused": True}
    size = conn.execute("SELECT pg_relation_size(%s)", [name]).fetchone()[0]
    return {**built, "index_mb": round(size / 2 ** 20, 1), "m": variant.m, "ef_construction": variant.ef_construction}


def recall_at_k(found: list[list[int]], truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[:K]) & set(t[:K].tolist())) / K for f, t in zip(found, truth)]))


class VariantSearch:
    """One variant's prepared statement on a plain psycopg connection (binary vector parameter)."""

    def __init__(self, conn, table: str, variant: Variant):
        self.conn, self.variant = conn, variant
        self.sql = variant.query.format(t=table)
        self.candidates = K

    def set_knob(self, ef: int, candidates: int) -> None:
        iterative = "relaxed_order" if candidates > ef else "off"
        self.conn.execute(f"SET hnsw.ef_search = {int(ef)}")
        self.conn.execute(f"SET hnsw.iterative_scan = {iterative}")
        self.conn.execute(f"SET hnsw.max_scan_tuples = {max(20000, 4 * candidates)}")
        self.candidates = candidates

    def one(self, vector: np.ndarray) -> list[int]:
        rows = self.conn.execute(self.sql, {"q": vector, "n": self.candidates}, prepare=True, binary=True).fetchall()
        return [r[0] for r in rows]

    def plan(self, vector: np.ndarray) -> str:
        rows = self.conn.execute("EXPLAIN " + self.sql, {"q": vector, "n": self.candidates}).fetchall()
        return " ".join(r[0] for r in rows)


def backend_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) the Postgres backend `pid` has used so far (0 for None: FAISS)."""
    if pid is None:
        return 0.0
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_qps(fn, items, backend: int | None = None) -> tuple[float, float]:
    """(queries per wall second, queries per CPU second). CPU = this process's + the backend's: on a CPU
    shared with other jobs it counts only the time the search itself ran."""
    start, cpu, pg = time.perf_counter(), time.process_time(), backend_cpu_s(backend)
    for item in items:
        fn(item)
    wall = time.perf_counter() - start
    used = time.process_time() - cpu + backend_cpu_s(backend) - pg
    return len(items) / wall, len(items) / max(used, 1e-3)


def keep_best(row: dict, measured: tuple[float, float]) -> None:
    row["qps_one"] = max(row["qps_one"], round(measured[0], 1))
    row["cpu_qps_one"] = max(row["cpu_qps_one"], round(measured[1], 1))


def faiss_at_recall(curve: list[dict], recall: float, key: str = "qps_one") -> tuple[float, bool]:
    """FAISS q/s at `recall`: on its Pareto front (each point's q/s raised to the best q/s of any point
    that finds at least as much, which only favours FAISS), log-linear between the points around it."""
    points = sorted((p["recall@10"], p[key]) for p in curve)
    front = [(r, max(q for r2, q in points if r2 >= r)) for r, _ in points]
    if recall <= front[0][0]:
        return front[0][1], recall < front[0][0]
    for (r0, q0), (r1, q1) in zip(front, front[1:]):
        if r0 <= recall <= r1:
            t = 0.0 if r1 == r0 else (recall - r0) / (r1 - r0)
            return math.exp(math.log(q0) + t * (math.log(q1) - math.log(q0))), False
    return front[-1][1], False  # above FAISS's best recall: compared with its best point


def compare(conn, table: str, hnsw, queries: np.ndarray, truth: np.ndarray, chosen: list[Variant],
            reps: int) -> dict:
    """FAISS curve and every (variant, knob) point, alternating rounds, best q/s of `reps`: per wall second
    (`qps_one`) and per CPU second used by the search (`cpu_qps_one`: client + Postgres backend)."""
    import faiss

    faiss.omp_set_num_threads(1)
    conn.execute("SET jit = off")
    backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    singles = [queries[i:i + 1] for i in range(len(queries))]
    vectors = list(queries)
    faiss_curve = []
    for ef in FAISS_EFS:
        hnsw.hnsw.efSearch = ef
        found = hnsw.search(queries, K)[1].tolist()
        faiss_curve.append({"ef_search": ef, "recall@10": round(recall_at_k(found, truth), 4), "qps_one": 0.0,
                            "cpu_qps_one": 0.0})
    points = []
    chosen = [v for v in chosen if index_used(conn, table, v, queries[0])]  # never time another variant's index
    for variant in chosen:
        search = VariantSearch(conn, table, variant)
        for ef, candidates in variant.knobs:
            search.set_knob(ef, candidates)
            found = [search.one(v) for v in vectors]  # also warms the cache
            points.append({"variant": variant.name, "ef_search": ef, "candidates": candidates,
                           "recall@10": round(recall_at_k(found, truth), 4), "qps_one": 0.0, "cpu_qps_one": 0.0,
                           "load_avg": []})
    for _ in range(reps):
        for row in faiss_curve:
            hnsw.hnsw.efSearch = row["ef_search"]
            keep_best(row, timed_qps(lambda q: hnsw.search(q, K), singles))
        for variant in chosen:
            search = VariantSearch(conn, table, variant)
            for row in (p for p in points if p["variant"] == variant.name):
                search.set_knob(row["ef_search"], row["candidates"])
                keep_best(row, timed_qps(search.one, vectors, backend))
                row["load_avg"].append(round(os.getloadavg()[0], 2))
    for row in points:
        faiss_qps, below = faiss_at_recall(faiss_curve, row["recall@10"])
        faiss_cpu_qps, _ = faiss_at_recall(faiss_curve, row["recall@10"], "cpu_qps_one")
        row["faiss_qps_at_recall"] = round(faiss_qps, 1)
        row["ratio_equal_recall"] = round(row["qps_one"] / faiss_qps, 3)
        row["faiss_cpu_qps_at_recall"] = round(faiss_cpu_qps, 1)
        row["cpu_ratio_equal_recall"] = round(row["cpu_qps_one"] / faiss_cpu_qps, 3)
        if below:
            row["below_faiss_range"] = True
    return {"faiss_hnsw": faiss_curve, "points": points, "summary": summarize(points)}


def summarize(points: list[dict]) -> dict:
    out = {}
    for name in dict.fromkeys(p["variant"] for p in points):
        rows = [p for p in points if p["variant"] == name and not p.get("below_faiss_range")]
        ratios = [p["ratio_equal_recall"] for p in rows]
        cpu = [p["cpu_ratio_equal_recall"] for p in rows]
        out[name] = {"median_ratio_equal_recall": round(float(np.median(ratios)), 3) if ratios else None,
                     "max_ratio_equal_recall": max(ratios) if ratios else None,
                     "median_cpu_ratio_equal_recall": round(float(np.median(cpu)), 3) if cpu else None,
                     "max_cpu_ratio_equal_recall": max(cpu) if cpu else None,
                     "best_recall@10": max(p["recall@10"] for p in points if p["variant"] == name)}
    return out


def index_used(conn, table: str, variant: Variant, vector: np.ndarray) -> bool:
    search = VariantSearch(conn, table, variant)
    search.set_knob(*variant.knobs[0])
    return variant.index_name(table) in search.plan(vector)
