"""What a SPICE step's document draw costs at paper scale: `PgDocumentSource.sample(128, rng)` over a
corpus of N synthetic documents (default 1,000,000), against the product's Postgres and tables.

    .venv/bin/python benchmarks/doc_sample.py [--rows 1000000] [--runs 10] [--draws 20] [--step-s S] [--drop]

The documents go into a scratch corpus (``bench-doc-sample``; reused when it already holds N) in
``--runs`` ingests, each followed by a few documents of another scratch corpus, so the corpus's ids
come in runs with gaps as real interleaved ingests leave them. A document has a title and a short
text and no chunks (a draw reads documents only). Timed, each on a fresh source:

- ``every_id_per_call_s``: the draw as it was first written: read every id of the corpus, sample
  the list, fetch the drawn documents (every call);
- ``id_list_first_s``: the id list read once (the cached-list version's first call);
- ``first_s``: this version's first call: the id runs computed in Postgres, one row per run;
- ``draw_s`` (median) / ``draw_s_max``: a warm draw (doc_count look-up + one primary-key query);
- ``after_ingest_s``: the first draw after an ingest of 1,000 more documents (only the ids above the
  newest known are read);
- ``plan``: the warm draw's document query under EXPLAIN ANALYZE: node types and rows read;
- with ``--step-s`` (a step's seconds), the warm draw's share of it.

One JSON line on stdout; ``--drop`` deletes the scratch corpora afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")

NAME, OTHER = "bench-doc-sample", "bench-doc-sample-other"
DRAW = 128  # SPICE's documents per step at the paper's batch


def insert(corpus, n: int, tag: str) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO corpora_document (corpus_id, title, source, content_hash, metadata, text, created_at) "
            "SELECT %s, 'synthetic ' || i, 'synthetic', %s || i, '{}'::jsonb, "
            "'synthetic document ' || i || ' ' || repeat('lorem ipsum ', 20), now() "
            "FROM generate_series(1, %s) AS i", [corpus.pk, f"{tag}:", n])
    type(corpus).objects.filter(pk=corpus.pk).update(doc_count=corpus.documents.count())


def build(rows: int, runs: int):
    from apps.corpora.models import Corpus

    corpus, _ = Corpus.objects.get_or_create(name=NAME, defaults={"description": "benchmarks/doc_sample.py"})
    other, _ = Corpus.objects.get_or_create(name=OTHER, defaults={"description": "benchmarks/doc_sample.py"})
    have = corpus.documents.count()
    if have != rows:
        remove_documents([corpus, other])
        t0 = time.perf_counter()
        per = rows // runs
        for r in range(runs):
            insert(corpus, per if r < runs - 1 else rows - per * (runs - 1), f"r{r}")
            insert(other, 3, f"o{r}-{time.time_ns()}")
        print(f"inserted {rows} documents in {runs} runs: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("ANALYZE corpora_document")
    corpus.refresh_from_db()
    return corpus, other


def remove_documents(corpora) -> None:
    """The scratch corpora's documents (they have no chunks), in one statement, not through the ORM's cascade."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("DELETE FROM corpora_document WHERE corpus_id = ANY(%s)", [[c.pk for c in corpora]])


def every_id_per_call(corpus, n: int, rng):
    """The draw before any caching: every id read per call."""
    from apps.corpora.models import Document as DocumentRow

    ids = list(DocumentRow.objects.filter(corpus=corpus).order_by("id").values_list("id", flat=True))
    chosen = rng.sample(ids, n)
    rows = {d.id: d for d in DocumentRow.objects.filter(id__in=chosen).only("id", "title", "text")}
    return [rows[i] for i in chosen]


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def plan_of_draw(source) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        source.sample(DRAW, random.Random(99))
    sql = [q["sql"] for q in queries.captured_queries if "corpora_document" in q["sql"]]
    out = {"queries": len(queries.captured_queries), "document_queries": len(sql), "nodes": []}
    for s in sql:
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + s)
            stack = [cur.fetchone()[0][0]["Plan"]]
        while stack:
            node = stack.pop()
            stack.extend(node.get("Plans", []))
            if node.get("Relation Name"):
                out["nodes"].append({"type": node["Node Type"], "relation": node["Relation Name"],
                                     "rows": node["Actual Rows"] * node.get("Actual Loops", 1),
                                     "removed_by_filter": node.get("Rows Removed by Filter", 0)})
    return out


def measure(rows: int, runs: int, draws: int, step_s: float | None) -> dict:
    from apps.corpora.retriever import PgDocumentSource

    corpus, other = build(rows, runs)
    load = os.getloadavg()
    old = [timed(every_id_per_call, corpus, DRAW, random.Random(s))[0] for s in range(2)]
    t0 = time.perf_counter()
    list(corpus.documents.order_by("id").values_list("id", flat=True).iterator(chunk_size=20_000))
    id_list_first = time.perf_counter() - t0
    source = PgDocumentSource(corpus)
    first, docs = timed(source.sample, DRAW, random.Random(0))
    assert len(docs) == DRAW and all(d.text for d in docs)
    warm = [timed(source.sample, DRAW, random.Random(s))[0] for s in range(1, draws + 1)]
    plan = plan_of_draw(source)
    documents = len(source)
    insert(corpus, 1000, "more-")
    after, _ = timed(source.sample, DRAW, random.Random(7))
    assert len(source) == documents + 1000
    from django.db import connection

    with connection.cursor() as cur:  # back to N documents, so the next run reuses the corpus
        cur.execute("DELETE FROM corpora_document WHERE corpus_id = %s AND content_hash LIKE 'more-%%'", [corpus.pk])
    type(corpus).objects.filter(pk=corpus.pk).update(doc_count=documents)
    out = {"documents": documents, "id_runs": int(len(source._starts)), "draw": DRAW,
           "every_id_per_call_s": round(statistics.median(old), 3), "id_list_first_s": round(id_list_first, 3),
           "first_s": round(first, 3), "draw_s": round(statistics.median(warm), 4), "draw_s_max": round(max(warm), 4),
           "after_ingest_s": round(after, 4), "id_reads": source.id_reads, "new_id_reads": source.new_id_reads,
           "plan": plan, "load_before": [round(x, 2) for x in load],
           "load_after": [round(x, 2) for x in os.getloadavg()]}
    if step_s:
        out["draw_share_of_step"] = round(out["draw_s"] / step_s, 5)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10, help="ingests the corpus is built in (runs of ids)")
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--step-s", type=float, default=None, help="a step's seconds, for the draw's share")
    parser.add_argument("--drop", action="store_true", help="delete the scratch corpora afterwards")
    args = parser.parse_args()
    import django

    django.setup()
    try:
        print(json.dumps(measure(args.rows, args.runs, args.draws, args.step_s)), flush=True)
    finally:
        if args.drop:
            from apps.corpora.models import Corpus

            scratch = list(Corpus.objects.filter(name__in=[NAME, OTHER]))
            remove_documents(scratch)
            Corpus.objects.filter(pk__in=[c.pk for c in scratch]).delete()


if __name__ == "__main__":
    main()
