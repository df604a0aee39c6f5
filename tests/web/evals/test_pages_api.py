"""Evals pages and API: permissions, benchmark uploads (and their 4xx errors), held-out sets from a
corpus, launching from the API and the run page, the compare view and the cross-play page."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from apps.corpora.models import Corpus, Document
from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult, EvalSample
from apps.runs.models import Checkpoint, Run
from trainer.evaluate import read_jsonl


def api(user=None):
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def jsonl(*rows) -> SimpleUploadedFile:
    return SimpleUploadedFile("qa.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode(), "application/jsonl")


@pytest.fixture
def run(db, researcher, tmp_path):
    run = Run.objects.create(method="grpo", model_name="smollm2-135m-instruct", config={"method": "grpo"},
                             owner=researcher, status="finished", queue="cpu")
    folder = tmp_path / "step-000005"
    folder.mkdir()
    Checkpoint.objects.create(run=run, step=5, path=str(folder))
    return run


def finished(model_spec, bench, score, run=None, step=None, n=10):
    job = EvalJob.objects.create(model_spec=model_spec, run=run, step=step, status="finished", queue="cpu")
    job.benchmarks.add(bench)
    result = EvalResult.objects.create(job=job, benchmark=bench, scoring=bench.scoring, n=n, correct=int(score * n),
                                       score=score, ci_low=score - 0.1, ci_high=score + 0.1, complete=True)
    EvalSample.objects.create(result=result, index=0, question="What is 1+1?", gold="2", prediction="2",
                              output="\\boxed{2}", correct=True, score=1.0)
    return job


# ---- permissions --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/api/v1/evals/", "/api/v1/evals/benchmarks/", "/api/v1/evals/compare/"])
def test_anonymous_api_calls_are_refused(db, path):
    response = api().get(path)
    assert response.status_code in (401, 403) and "error" in response.json()


def test_anonymous_pages_redirect_to_login(db, client):
    response = client.get("/evals/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_readers_read_but_cannot_launch_or_upload(reader, run, data_dir):
    assert api(reader).get("/api/v1/evals/").status_code == 200
    assert api(reader).get("/api/v1/evals/benchmarks/").json()["results"]
    response = api(reader).post("/api/v1/evals/", {"model": "base:smollm2-135m-instruct", "benchmarks": ["gsm8k"]},
                                format="json")
    assert response.status_code == 403 and "researcher role" in response.json()["error"]
    response = api(reader).post("/api/v1/evals/benchmarks/", {"name": "x", "file": jsonl({"question": "q", "answer": 1})},
                                format="multipart")
    assert response.status_code == 403
    response = api(reader).post(f"/api/v1/runs/{run.pk}/crossplay/", {"checkpoints": [1]}, format="json")
    assert response.status_code == 403
    assert EvalJob.objects.count() == 0 and not Benchmark.objects.filter(name="x").exists()


# ---- benchmarks ---------------------------------------------------------------------------------

def test_a_researcher_uploads_a_benchmark_that_is_frozen(researcher, data_dir):
    rows = [{"question": "Capital of France?", "answer": "Paris"},
            {"question": "Pick", "choices": ["red", "blue"], "answer": "blue", "scoring": "mcq"}]
    response = api(researcher).post("/api/v1/evals/benchmarks/", {"name": "my-qa", "file": jsonl(*rows)},
                                    format="multipart")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["kind"], body["scoring"], body["size"]) == ("my-qa", "upload", "exact", 2)
    bench = Benchmark.objects.get(name="my-qa")
    assert bench.path.startswith(str(data_dir)) and [i.answer for i in read_jsonl(bench.path)] == ["Paris", "B"]


@pytest.mark.parametrize("name, content, message", [
    ("bad", b'{"question": "q"}\n', 'qa.jsonl:1: "answer" is missing'),
    ("bad", b'{"question": "q", "answer": "a"}\nnot json\n', "qa.jsonl:2: not valid JSON"),
    ("bad", b"", "holds no items"),
    ("Bad Name!", b'{"question": "q", "answer": "a"}\n', "name must be 1-100 characters"),
    ("gsm8k", b'{"question": "q", "answer": "a"}\n', "exists already"),
])
def test_bad_uploads_are_4xx_with_the_reason(researcher, data_dir, name, content, message):
    upload = SimpleUploadedFile("qa.jsonl", content)
    response = api(researcher).post("/api/v1/evals/benchmarks/", {"name": name, "file": upload}, format="multipart")
    assert response.status_code == 400 and message in response.json()["error"]


def test_an_upload_without_a_file_says_how(researcher, data_dir):
    response = api(researcher).post("/api/v1/evals/benchmarks/", {"name": "nofile"}, format="multipart")
    assert response.status_code == 400 and 'multipart field "file"' in response.json()["error"]


def test_a_held_out_set_is_built_from_a_corpus_and_frozen(researcher, data_dir):
    corpus = Corpus.objects.create(name="facts")
    for i, (title, text) in enumerate([
            ("Eiffel Tower", "The Eiffel Tower was designed by the company of Gustave Eiffel and built from 1887 to "
                             "1889 in Paris."),
            ("Moon", "The Moon orbits Earth at an average distance of 384,400 km, about 30 times its diameter.")]):
        Document.objects.create(corpus=corpus, title=title, text=text, content_hash=str(i))
    response = api(researcher).post("/api/v1/evals/benchmarks/", {"name": "facts-cloze", "corpus": "facts", "n": 5},
                                    format="json")
    assert response.status_code == 201, response.json()
    bench = Benchmark.objects.get(name="facts-cloze")
    items = read_jsonl(bench.path)
    assert bench.kind == "heldout" and bench.size == len(items) == 2 and bench.corpus == corpus
    ids = set(Document.objects.filter(corpus=corpus).values_list("id", flat=True))
    assert {int(i.meta["document_id"]) for i in items} == ids and all("____" in i.question for i in items)
    response = api(researcher).post("/api/v1/evals/benchmarks/", {"name": "x2", "corpus": "nope"}, format="json")
    assert response.status_code == 400 and "no corpus named 'nope'" in response.json()["error"]


# ---- launching ----------------------------------------------------------------------------------

def test_launch_through_the_api_validates_every_field(researcher, run, data_dir):
    client = api(researcher)
    cases = [({"benchmarks": ["gsm8k"]}, "choose what to evaluate"),
             ({"model": "base:smollm2-135m-instruct", "benchmarks": []}, "choose at least one benchmark"),
             ({"model": "base:smollm2-135m-instruct", "benchmarks": ["gsm8k"], "limit": "many"}, "limit must be"),
             ({"checkpoint": 999999, "benchmarks": ["gsm8k"]}, "no checkpoint 999999"),
             ({"model": "/etc", "benchmarks": ["gsm8k"]}, "base:<model name>"),
             ({"model": "base:smollm2-135m-instruct", "benchmarks": ["gsm8k"], "queue": "tpu"}, "unknown queue"),
             ({"run": "abc", "benchmarks": ["gsm8k"]}, "no run")]
    for body, message in cases:
        response = client.post("/api/v1/evals/", body, format="json")
        assert response.status_code == 400 and message in response.json()["error"], (body, response.json())
    assert EvalJob.objects.count() == 0


def test_the_run_page_shows_the_panel_and_launches_with_htmx(transactional_db, roles, researcher, reader, run, client):
    import django_rq

    client.force_login(researcher)
    page = client.get(f"/runs/{run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="evals-panel"' in html and 'value="ckpt:' in html and "checkpoint step 5" in html
    ckpt = run.checkpoints.get()
    response = client.post("/evals/launch/", {"run": run.pk, "target": f"ckpt:{ckpt.pk}", "benchmarks": ["gsm8k"],
                                              "limit": "3", "queue": "cpu"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "queued on the CPU (queue evals" in response.content.decode()
    job = EvalJob.objects.get()
    assert (job.checkpoint, job.step, job.limit, job.queue) == (ckpt, 5, 3, "evals")
    assert django_rq.get_queue("evals").job_ids == [job.job_id]  # queued in Redis for a worker
    response = client.post("/evals/launch/", {"run": run.pk, "target": "ckpt:424242", "benchmarks": ["gsm8k"]},
                           HTTP_HX_REQUEST="true")
    assert 'id="eval-error"' in response.content.decode() and "no checkpoint" in response.content.decode()
    client.force_login(reader)
    assert client.post("/evals/launch/", {"run": run.pk, "target": "base:x", "benchmarks": ["gsm8k"]}).status_code == 403
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="eval-launch"' not in html and 'id="evals-panel"' in html  # the panel, no form without the role


def test_evals_pages_render(reader, run, client, data_dir):
    bench = Benchmark.objects.get_or_create(name="gsm8k", defaults={"title": "GSM8K", "kind": "builtin",
                                                                    "scoring": "math"})[0]
    job = finished("base:smollm2-135m-instruct", bench, 0.3)
    client.force_login(reader)
    index = client.get("/evals/").content.decode()
    assert "gsm8k" in index and f"/evals/jobs/{job.pk}/" in index and 'id="bench-upload"' not in index
    detail = client.get(f"/evals/jobs/{job.pk}/").content.decode()
    assert "30.0%" in detail and "[20.0%, 40.0%]" in detail and "What is 1+1?" in detail


# ---- compare ------------------------------------------------------------------------------------

def test_compare_base_vs_checkpoints_vs_runs(reader, run, researcher, client):
    bench = Benchmark.objects.get_or_create(name="gsm8k", defaults={"title": "GSM8K", "kind": "builtin",
                                                                    "scoring": "math"})[0]
    other = Run.objects.create(method="spice", model_name="smollm2-135m-instruct", config={}, owner=researcher)
    finished("base:smollm2-135m-instruct", bench, 0.2)
    finished("/x/step-5", bench, 0.25, run=run, step=5)
    finished("/x/step-10", bench, 0.3, run=run, step=10)
    finished("/y/step-10", bench, 0.4, run=other, step=10)
    data = api(reader).get(f"/api/v1/evals/compare/?run={run.pk},{other.pk}&benchmark=gsm8k").json()
    assert [r["label"] for r in data["rows"]] == ["base:smollm2-135m-instruct", f"run {run.pk} @ step 5",
                                                  f"run {run.pk} @ step 10", f"run {other.pk} @ step 10"]
    series = {s["run"]: s for s in data["series"]}
    assert series[run.pk]["steps"] == [0, 5, 10] and series[run.pk]["scores"] == [0.2, 0.25, 0.3]
    assert series[other.pk]["ci_low"] == [pytest.approx(0.1), pytest.approx(0.3)]
    client.force_login(reader)
    page = client.get(f"/evals/compare/?run={run.pk}&run={other.pk}&benchmark=gsm8k").content.decode()
    assert 'id="compare-chart"' in page and f"run {other.pk} @ step 10" in page and "plotly.min.js" in page
    response = api(reader).get("/api/v1/evals/compare/?run=abc")
    assert response.status_code == 400 and "run must be run ids" in response.json()["error"]
    assert client.get("/evals/compare/?run=999999").status_code == 400
    # the form sent with nothing picked says so (the first visit, without ?go=1, does not)
    first = client.get("/evals/compare/").content.decode()
    assert 'id="compare-error"' not in first and 'id="cmp-runs"' in first
    empty = client.get("/evals/compare/?go=1")
    assert empty.status_code == 400 and "Pick one or more runs to compare" in empty.content.decode()
    # the run picker names imported runs by their folders (ours and TRL's runs of one model look alike otherwise)
    other.imported_from = "/somewhere/examples/runs/trl-grpo-gsm8k-qwen05-tta"
    other.save(update_fields=["imported_from"])
    picker = client.get("/evals/compare/").content.decode().split('id="cmp-runs"')[1].split("</select>")[0]
    assert f"run {other.pk} (trl-grpo-gsm8k-qwen05-tta) · spice · smollm2-135m-instruct</option>" in picker


def test_the_crossplay_page_draws_a_heatmap(reader, run, client):
    job = CrossPlay.objects.create(run=run, checkpoints=[{"id": 1, "step": 5, "path": "/a"}, {"id": 2, "step": 9,
                                                                                              "path": "/b"}],
                                   matrix=[[0.5, 0.75], [0.25, None]], cells_done=3, status="running")
    client.force_login(reader)
    html = client.get(f"/evals/crossplay/{job.pk}/").content.decode()
    assert 'id="crossplay-heatmap"' in html and "0.750" in html and 'id="crossplay-data"' in html
    # the drawing is a static file (the CSP refuses inline scripts): the page loads it and it draws a heatmap
    assert "js/crossplay.js" in html and 'type: "heatmap"' in Path(finders.find("js/crossplay.js")).read_text()
    assert api(reader).get(f"/api/v1/evals/crossplay/{job.pk}/").json()["matrix"] == [[0.5, 0.75], [0.25, None]]
    assert api(reader).get(f"/api/v1/runs/{run.pk}/crossplay/").json()["results"][0]["cells_done"] == 3


def test_the_crossplay_page_names_its_run_by_its_label(reader, run, client):
    run.name = "spice-gate-wiki-qwen15"
    run.save(update_fields=["name"])
    job = CrossPlay.objects.create(run=run, checkpoints=[], matrix=[], status="queued")
    client.force_login(reader)
    html = client.get(f"/evals/crossplay/{job.pk}/").content.decode()
    heading = html.split("<h1>")[1].split("</h1>")[0]
    assert f'<a href="/runs/{run.pk}/">run {run.pk} · spice-gate-wiki-qwen15</a>' in heading
    assert f"<title>Cross-play {job.pk} · run {run.pk} · spice-gate-wiki-qwen15" in html


def test_a_cpu_evaluation_defaults_to_a_few_items_with_an_estimate_before_launch(db, researcher, client, data_dir):
    """No limit on the CPU means 10 items (a GPU keeps the whole benchmark); the form's estimate line says
    items x tokens, and a time once an evaluation on that queue has finished (scaled by max_new_tokens)."""
    from django.utils import timezone

    from apps.evals import benchmarks as bench_service
    from apps.evals.launch import launch_eval
    from apps.evals.models import Benchmark, EvalJob, EvalResult

    bench_service.ensure_builtins()
    job = launch_eval(benchmarks=["gsm8k"], model="base:smollm2-135m-instruct", queue="cpu", enqueue_job=False)
    assert (job.queue, job.limit) == ("evals", 10)
    assert launch_eval(benchmarks=["gsm8k"], model="base:smollm2-135m-instruct", queue="gpu",
                       enqueue_job=False).limit is None

    client.force_login(researcher)
    text = client.get("/evals/estimate/?queue=cpu&benchmarks=gsm8k&max_new_tokens=512").content.decode()
    assert "10 items, at most 5,120 generated tokens" in text and "no finished evaluation on evals yet" in text
    done = EvalJob.objects.create(model_spec="base:smollm2-135m-instruct", queue="evals", status="finished",
                                  done=4, total=4, max_new_tokens=256, finished_at=timezone.now())
    EvalResult.objects.create(job=done, benchmark=Benchmark.objects.get(name="gsm8k"), scoring="math", n=4,
                              correct=1, score=0.25, seconds=40.0, complete=True)
    text = client.get("/evals/estimate/?queue=cpu&benchmarks=gsm8k&limit=3&max_new_tokens=512").content.decode()
    # 10 s an item at 256 tokens -> 20 s at 512, for 3 items 60 s
    assert "3 items, at most 1,536 generated tokens; 60 s on evals (20 s an item" in text
    assert f"scaled from evaluation {done.pk}" in text
    page = client.get("/evals/").content.decode()
    assert 'id="base-limit"' in page and 'id="eval-estimate"' in page
