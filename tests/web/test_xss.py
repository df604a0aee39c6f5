"""Model output (and document text) is never rendered as HTML.

A generated ``<script>`` or ``<img onerror>`` is put into every text a run, a corpus or an
evaluation stores (task question / answer, attempt text / turns / passages, rubric, grade, run
error and events, document title / text, eval sample question / output / prediction, review
snapshot and reason); then each page and htmx fragment that shows them must contain the text
escaped and never the raw markup. The templates carry no ``|safe`` / ``mark_safe`` /
``autoescape off`` (``test_no_template_turns_escaping_off`` keeps it so) and the page scripts set
model text with ``textContent`` (the live page's websocket rows: test_live_page_browser.py).
"""
from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client

from apps.corpora.ingest import ingest_documents
from apps.corpora.models import Corpus
from apps.corpora.parsing import ParsedDoc
from apps.episodes.models import Attempt, Grade, Rubric, Task
from apps.evals.models import Benchmark, EvalJob, EvalResult, EvalSample
from apps.review.models import ReviewItem
from apps.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'
RAW = [b"<script>alert(", b"<img src=x onerror"]
ESCAPED = b"&lt;script&gt;alert(" + b"&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"


def _evil(tag: str) -> str:
    return f"{tag} {EVIL}"


@pytest.fixture
def world(researcher):
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, status="failed",
                             error=_evil("error"), current_step=1)
    RunEvent.objects.create(run=run, kind="status", step=1, message=_evil("event"))
    task = Task.objects.create(run=run, key="1:t0", step=1, role="challenger", question=_evil("question"),
                               answer=_evil("answer"), pass_rate=0.5, data={"gates": {"why": _evil("gate")}})
    attempt = Attempt.objects.create(
        run=run, task=task, key="1:t0:a0", task_key="1:t0", role="reasoner", step=1, text=_evil("attempt"), reward=1.0,
        turns=[{"role": "assistant", "text": _evil("turn")}, {"role": "tool", "text": _evil("tool")}],
        passages=[{"document_id": "1", "chunk_id": "2", "title": _evil("ptitle"), "text": _evil("passage"), "score": 1}])
    rubric = Rubric.objects.create(run=run, task=task, key="1:t0:r0", task_key="1:t0", step=1, text=_evil("rubric"),
                                   priority="critical")
    Grade.objects.create(run=run, attempt=attempt, rubric=rubric, key="1:t0:a0:r0", attempt_key=attempt.key,
                         rubric_key=rubric.key, step=1, score=0.5, judge_text=_evil("judge"))
    item = ReviewItem.objects.create(run=run, run_number=run.pk, kind="rubric", key=rubric.key, step=1, task=task,
                                     rubric=rubric, task_key=task.key, status="flagged", reason=_evil("reason"),
                                     snapshot={"text": _evil("snapshot"), "question": _evil("snapquestion")},
                                     suspicious=[_evil("suspicious")])
    corpus = Corpus.objects.create(name="xss", description=_evil("description"))
    ingest_documents(corpus, [ParsedDoc(_evil("title"), _evil("document") + " owls hunt at night", "test")])
    doc = corpus.documents.get()
    bench = Benchmark.objects.create(name="xss-bench", title=_evil("btitle"), kind="upload", scoring="exact", size=1)
    job = EvalJob.objects.create(model_spec="base:tiny", owner=researcher, status="failed", error=_evil("evalerror"))
    result = EvalResult.objects.create(job=job, benchmark=bench, scoring="exact", n=1)
    EvalSample.objects.create(result=result, index=0, question=_evil("evalq"), gold=_evil("gold"),
                              prediction=_evil("prediction"), output=_evil("output"))
    return {"run": run, "attempt": attempt, "item": item, "corpus": corpus, "doc": doc, "job": job}


def _pages(w) -> dict[str, tuple[str, dict]]:
    run, corpus = w["run"], w["corpus"]
    htmx = {"HTTP_HX_REQUEST": "true"}
    return {  # url -> (headers, the tagged texts it must show escaped)
        f"/runs/{run.pk}/": ({}, ["question", "attempt", "error", "event"]),
        f"/runs/{run.pk}/samples/": (htmx, ["question", "answer", "attempt"]),
        f"/runs/{run.pk}/controls/": (htmx, []),
        f"/runs/{run.pk}/attempts/{w['attempt'].key}/": ({}, ["question", "answer", "turn", "tool", "ptitle", "passage"]),
        "/runs/": ({}, []),
        f"/review/?item={w['item'].pk}": ({}, ["question", "rubric", "reason", "suspicious", "judge"]),
        f"/review/runs/{run.pk}/panel/": (htmx, ["reason"]),
        f"/corpora/{corpus.pk}/documents/{w['doc'].pk}/": ({}, ["title", "document"]),
        f"/corpora/{corpus.pk}/": ({}, ["title"]),
        f"/corpora/{corpus.pk}/search/?q=owls&mode=lexical&k=5": (htmx, ["title"]),
        "/corpora/": ({}, ["description"]),
        f"/evals/jobs/{w['job'].pk}/?benchmark=xss-bench": ({}, ["evalq", "gold", "prediction", "output", "evalerror"]),
        f"/evals/jobs/{w['job'].pk}/": (htmx, ["evalerror"]),
        "/": ({}, []),
    }


def test_model_text_is_escaped_on_every_page_and_fragment(world, researcher, reviewer):
    client = Client()
    user = researcher
    user.groups.add(*reviewer.groups.all())  # the review queue too
    client.force_login(user)
    run = world["run"].pk
    # pages that show no model text here: what they must show instead, so that an empty page cannot pass
    shown = {f"/runs/{run}/controls/": 'id="run-status" class="badge failed"', "/runs/": f'href="/runs/{run}/"',
             "/": "<title>Home · Selfplay</title>"}
    problems = []
    for url, (headers, tags) in _pages(world).items():
        response = client.get(url, **headers)
        body = response.content
        if response.status_code != 200:
            problems.append(f"{url}: {response.status_code}")
            continue
        if url in shown and shown[url].encode() not in body:
            problems.append(f"{url}: the page lacks {shown[url]!r}")
        for raw in RAW:
            if raw in body:
                at = body.index(raw)
                problems.append(f"{url}: raw markup {body[max(0, at - 80):at + 60]!r}")
        for tag in tags:
            if f"{tag} ".encode() + ESCAPED not in body and f"{tag} ".encode() + ESCAPED[:60] not in body:
                problems.append(f"{url}: {tag!r} is not shown escaped")
    assert not problems, "\n".join(problems)


def test_json_fragments_are_json_not_html(world, researcher):
    client = Client()
    client.force_login(researcher)
    ledger = client.get(f"/runs/{world['run'].pk}/ledger/")
    assert ledger.status_code == 200 and ledger["Content-Type"].startswith("application/json")
    assert ledger["X-Content-Type-Options"] == "nosniff"


TEMPLATES = settings.BASE_DIR / "templates"
UNSAFE = re.compile(r"\|\s*safe\b|autoescape\s+off|\bsafeseq\b")
UNSAFE_JS = re.compile(r"\.innerHTML\s*=|\.outerHTML\s*=|insertAdjacentHTML|document\.write\(")


def test_no_template_turns_escaping_off_and_no_script_parses_html():
    """Every template and static script, and the Python that could bypass escaping."""
    problems = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if UNSAFE.search(line) or UNSAFE_JS.search(line):
                problems.append(f"{path.relative_to(settings.BASE_DIR)}:{n}: {line.strip()[:120]}")
    for path in sorted((settings.BASE_DIR / "static" / "js").rglob("*.js")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if UNSAFE_JS.search(line):
                problems.append(f"{path.relative_to(settings.BASE_DIR)}:{n}: {line.strip()[:120]}")
    for path in sorted((settings.BASE_DIR / "apps").rglob("*.py")):
        text = path.read_text()
        if re.search(r"\bmark_safe\b|\bSafeString\b|\bformat_html\b|is_safe\s*=\s*True", text):
            problems.append(f"{path.relative_to(settings.BASE_DIR)}: builds HTML outside the escaping templates")
    assert not problems, "markup from data must stay escaped:\n" + "\n".join(problems)
