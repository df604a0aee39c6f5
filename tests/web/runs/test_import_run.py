"""manage.py import_run on a real run folder: a tiny grpo run made by `python -m trainer run` (the
product command, in a subprocess), with evals.jsonl and crossplay.json written by the trainer's
helpers (trainer/runfolder.py). The import makes a finished, imported Run with the rows a live
run has (written by the same DjangoSink), checkpoint evaluations and the cross-play matrix the evals
pages read; it works without the weights, is idempotent, refuses bad folders with messages naming
the file and line (no traceback), and the run page carries the chart data and the heatmap."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.episodes.models import Attempt, Task
from apps.evals.models import Benchmark, CrossPlay, EvalJob, EvalResult
from apps.runs.models import Checkpoint, Metric, Run, RunEvent
from tests.web.runs.test_live_page_browser import server  # noqa: F401  (fixture: the real ASGI server)
from trainer.evaluate import append_eval, write_crossplay

STEPS = 3
EVALS = [  # (step, benchmark, score, ci_low, ci_high)
    (0, "gsm8k-660-1318", 0.269, 0.237, 0.302), (0, "arith-heldout", 0.10, 0.05, 0.15),
    (2, "gsm8k-660-1318", 0.31, 0.27, 0.35), (3, "gsm8k-660-1318", 0.38, 0.34, 0.42),
    (3, "arith-heldout", 0.20, 0.12, 0.28),
]
PASS = [[0.5, 0.75], [0.25, None]]


@pytest.fixture(scope="module")
def trained_folder(tmp_path_factory, tiny_model_dir, tiny_prompts_path):  # noqa: F811
    """A run folder written by `python -m trainer run` (3 grpo steps of the tiny model, a checkpoint each
    step, the newest 2 kept) plus its evaluation files, written by append_eval / write_crossplay."""
    root = tmp_path_factory.mktemp("import-src")
    config = {"method": "grpo", "seed": 0, "model": {"name_or_path": str(tiny_model_dir), "lora": {"r": 0}},
              "data": {"path": str(tiny_prompts_path)}, "reward": "exact",
              "rollout": {"max_new_tokens": 6, "group_size": 2},
              "train": {"steps": STEPS, "lr": 1e-3, "prompts_per_step": 2, "micro_batch_size": 4, "device": "cpu"},
              "checkpoint": {"every": 1, "keep_last": 2}, "grpo": {"log_samples": 4}}
    (root / "tiny.yaml").write_text(yaml.safe_dump(config))
    out = root / "run"
    env = {**os.environ, "SELFPLAY_TORCH_THREADS": "1", "HF_HUB_OFFLINE": "1", "SELFPLAY_DATA_DIR": str(root / "var")}
    done = subprocess.run([sys.executable, "-m", "trainer", "run", str(root / "tiny.yaml"), "--out", str(out)],
                          cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == STEPS
    for step, bench, score, lo, hi in EVALS:
        append_eval(out, {"step": step, "checkpoint": "base:tiny" if step == 0 else f"/gpu/run/checkpoints/step-{step:06d}",
                          "benchmark": bench, "scoring": "math", "n": 200, "score": score, "ci_low": lo,
                          "ci_high": hi, "seconds": 12.5})
    write_crossplay(out, ["base", "step 3"], ["base", "step 3"], [0, 3], [0, 3], PASS, [[32, 32], [24, 0]])
    return out


@pytest.fixture
def folder(trained_folder, tmp_path):
    """A copy of the run folder this test may change."""
    return shutil.copytree(trained_folder, tmp_path / "run")


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _import(folder, *more) -> str:
    out = io.StringIO()
    call_command("import_run", str(folder), *more, stdout=out)
    return out.getvalue()


def _counts(run) -> dict:
    return {"metrics": Metric.objects.filter(run=run).count(), "tasks": Task.objects.filter(run=run).count(),
            "attempts": Attempt.objects.filter(run=run).count(), "checkpoints": run.checkpoints.count(),
            "jobs": EvalJob.objects.filter(run=run).count(), "results": EvalResult.objects.filter(job__run=run).count(),
            "crossplays": CrossPlay.objects.filter(run=run).count(), "benchmarks": Benchmark.objects.count(),
            "runs": Run.objects.count()}


def test_import_makes_a_finished_imported_run_with_the_rows_of_a_live_run(db, folder, researcher):
    printed = _import(folder, "--user", researcher.username)
    run = Run.objects.get()
    assert f"run {run.pk} imported from {folder}" in printed
    assert (run.status, run.method, run.imported_from, run.imported, run.owner) == \
        ("finished", "grpo", str(folder), True, researcher)
    assert run.config == yaml.safe_load((folder / "config.yaml").read_text())
    assert run.model_name == run.config["model"]["name_or_path"]
    assert (run.current_step, run.total_steps) == (STEPS, STEPS)

    # metrics: one row per numeric (step, role, name) of metrics.jsonl
    expected = {(r["step"], r["role"], k): float(v) for r in _lines(folder / "metrics.jsonl")
                for k, v in r.items() if k not in ("step", "role") and isinstance(v, (int, float))}
    stored = {(m.step, m.role, m.name): m.value for m in Metric.objects.filter(run=run)}
    assert stored == pytest.approx(expected) and len(stored) > 20

    # samples: tasks and attempts where a live run's DjangoSink puts them, attempts linked to their task
    samples = _lines(folder / "samples.jsonl")
    assert Task.objects.filter(run=run).count() == sum(r["kind"] == "task" for r in samples) > 0
    assert Attempt.objects.filter(run=run).count() == sum(r["kind"] == "attempt" for r in samples) > 0
    assert not Attempt.objects.filter(run=run, task__isnull=True).exists()
    live = Run.objects.create(method="grpo", model_name="tiny", config={})  # the same records through a live sink
    from apps.runs.sink import DjangoSink

    sink = DjangoSink(live, live=False)
    for record in samples:
        sink.samples(record["step"], [record])
    sink.close()

    def rows(r):
        return sorted(Attempt.objects.filter(run=r).values_list("key", "role", "step", "text", "reward", "token_ids",
                                                                 "loss_mask", "task__key"))
    assert rows(run) == rows(live)

    # checkpoints: every one the run wrote (step 1 was pruned on disk; its line is in checkpoints.jsonl)
    assert sorted(run.checkpoints.values_list("step", flat=True)) == [1, 2, 3]
    assert run.checkpoint_path.endswith("step-000003")

    # evaluations: one finished job per step (step 0 = base:<model>), a complete result per benchmark
    jobs = {j.step: j for j in EvalJob.objects.filter(run=run)}
    assert sorted(jobs, key=lambda s: -1 if s is None else s) == [None, 2, 3]
    assert jobs[None].model_spec == f"base:{run.model_name}" and jobs[None].checkpoint is None
    assert jobs[3].checkpoint == run.checkpoints.get(step=3) and jobs[3].model_spec.endswith("step-000003")
    assert {j.status for j in jobs.values()} == {"finished"}
    got = {(j.step or 0, r.benchmark.name): (r.score, r.ci_low, r.ci_high, r.n, r.correct, r.complete)
           for j in jobs.values() for r in j.results.select_related("benchmark")}
    assert got == {(s, b): (sc, lo, hi, 200, round(sc * 200), True) for s, b, sc, lo, hi in EVALS}
    bench = Benchmark.objects.get(name="gsm8k-660-1318")
    assert bench.kind == "imported" and bench.scoring == "math"
    # what the imported benchmark lacks is its questions file, not the item samples its evaluations keep
    assert "not stored here" in bench.description and "questions file" in bench.description
    assert "items are not stored" not in bench.description and "eval_samples/" in bench.description

    cross = CrossPlay.objects.get(run=run)
    assert (cross.status, cross.matrix, cross.counts, cross.cells_done, cross.cells_total) == \
        ("finished", PASS, [[32, 32], [24, 0]], 3, 4)
    assert cross.labels == (["base", "step 3"], ["base", "step 3"])
    assert cross.checkpoints[1]["id"] == run.checkpoints.get(step=3).pk and cross.checkpoints[0]["id"] is None
    assert RunEvent.objects.filter(run=run, kind="status", message__startswith=f"imported from {folder}").count() == 1


def test_import_needs_no_weights(db, folder):
    shutil.rmtree(folder / "checkpoints")  # a GPU run's weights stay on the GPU machine
    _import(folder)
    run = Run.objects.get()
    assert sorted(run.checkpoints.values_list("step", flat=True)) == [1, 2, 3]  # from checkpoints.jsonl
    assert EvalResult.objects.filter(job__run=run).count() == len(EVALS)


def test_importing_again_duplicates_nothing_and_takes_what_is_new(db, folder):
    _import(folder)
    run = Run.objects.get()
    before = _counts(run)
    again = _import(folder)
    assert f"run {run.pk} already imported from {folder}; updated in place, nothing duplicated" in again
    assert _counts(run) == before
    # the folder grew: a re-evaluation of step 3 (replaces) and a new checkpoint's evaluation (adds)
    append_eval(folder, {"step": 3, "checkpoint": "x", "benchmark": "gsm8k-660-1318", "scoring": "math", "n": 200,
                         "score": 0.4, "ci_low": 0.35, "ci_high": 0.45, "seconds": 1.0})
    append_eval(folder, {"step": 1, "checkpoint": "y", "benchmark": "gsm8k-660-1318", "scoring": "math", "n": 200,
                         "score": 0.29, "ci_low": 0.25, "ci_high": 0.33, "seconds": 1.0})
    _import(folder, "--json")
    after = _counts(run)
    assert after == {**before, "jobs": before["jobs"] + 1, "results": before["results"] + 1}
    assert EvalResult.objects.get(job__run=run, job__step=3, benchmark__name="gsm8k-660-1318").score == 0.4
    assert Run.objects.get().pk == run.pk


def _fails(folder, *more) -> str:
    with pytest.raises(CommandError) as info:
        _import(folder, *more)
    return str(info.value)


def test_bad_folders_are_refused_with_what_to_fix(db, folder, tmp_path):
    assert "is not a folder" in _fails(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("")
    assert "is not a run folder: it has no config.yaml and no metrics.jsonl" in _fails(empty)
    assert "it holds: notes.txt" in _fails(empty)

    def broken(name, text, mode="a"):
        bad = shutil.copytree(folder, tmp_path / f"bad-{name}-{len(list(tmp_path.iterdir()))}")
        with open(bad / name, mode) as f:
            f.write(text)
        return _fails(bad)

    n = len((folder / "samples.jsonl").read_text().splitlines())
    assert f"samples.jsonl line {n + 1}: not valid JSON" in broken("samples.jsonl", '{"kind": "task", "key": ')
    m = len((folder / "metrics.jsonl").read_text().splitlines())
    assert f'metrics.jsonl line {m + 1}: "step" must be a whole number' in broken("metrics.jsonl", '{"step": "x"}\n')
    assert 'evals.jsonl line 6: "score" is a fraction in [0, 1], got 38.0' in broken(
        "evals.jsonl", json.dumps({"step": 3, "checkpoint": "c", "benchmark": "gsm8k", "scoring": "math", "n": 5,
                                   "score": 38.0, "ci_low": 30.0, "ci_high": 40.0, "seconds": 1}) + "\n")
    assert 'crossplay.json: "pass_rate" must be 2 rows' in broken(
        "crossplay.json", json.dumps({"challengers": ["a", "b"], "reasoners": ["a", "b"], "steps_challenger": [0, 1],
                                      "steps_reasoner": [0, 1], "pass_rate": [[0.5, 0.5]], "n": [[1, 1], [1, 1]]}), "w")
    assert "config.yaml is not a valid run config" in broken("config.yaml", "method: nope\n", "w")
    assert Run.objects.count() == 0  # a bad line anywhere leaves the database as it was
    assert Benchmark.objects.filter(kind="imported").count() == 0
    # several folders: each good one is imported, each bad one named on stderr
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 of 2 folder"):
        call_command("import_run", str(folder), str(empty), stdout=io.StringIO(), stderr=err)
    assert "it has no config.yaml" in err.getvalue() and Run.objects.count() == 1


def test_a_bad_folder_from_the_shell_is_a_message_not_a_traceback(db, folder, tmp_path):
    from tests.web.runs.test_live_page_browser import _database_url

    with open(folder / "samples.jsonl", "a") as f:
        f.write("not json\n")
    env = {**os.environ, "DATABASE_URL": _database_url()}
    done = subprocess.run([sys.executable, "manage.py", "import_run", str(folder)], cwd=settings.BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "samples.jsonl line" in done.stderr and "not valid JSON" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_site_runs_own_folder_is_not_imported_twice(db, folder):
    Run.objects.create(method="grpo", model_name="tiny", config={}, run_dir=str(folder.resolve()))
    assert "is the folder of run" in _fails(folder)


def _evals_chart(client, run) -> dict:
    page = client.get(f"/runs/{run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="run-evals-card"' in html
    start = html.index('<script id="run-evals-chart-data" type="application/json">') + \
        len('<script id="run-evals-chart-data" type="application/json">')
    return json.loads(html[start:html.index("</script>", start)])


def test_the_run_page_carries_the_eval_chart_and_the_heatmap(db, folder, client, researcher):
    _import(folder)
    run = Run.objects.get()
    client.force_login(researcher)
    data = _evals_chart(client, run)
    by_name = {s["benchmark"]: s for s in data["series"]}
    assert set(by_name) == {"gsm8k-660-1318", "arith-heldout"}
    gsm = by_name["gsm8k-660-1318"]
    assert (gsm["steps"], gsm["scores"], gsm["ci_low"], gsm["ci_high"]) == \
        ([0, 2, 3], [0.269, 0.31, 0.38], [0.237, 0.27, 0.34], [0.302, 0.35, 0.42])
    assert by_name["arith-heldout"]["steps"] == [0, 3]
    cross = data["crossplay"]
    assert (cross["rows"], cross["columns"], cross["matrix"], cross["counts"]) == \
        (["base", "step 3"], ["base", "step 3"], PASS, [[32, 32], [24, 0]])
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Imported from" in html and f"<dd>{folder.name} <span" in html  # a server path: admins see it whole
    card = html.split('id="run-evals-card"')[1].split("</section>")[0]  # chart and heatmap side by side
    assert 'class="grid2"' in card and 'id="run-evals-chart"' in card and 'id="run-crossplay-heatmap"' in card
    # a newer evaluation of the same base model from elsewhere (e.g. with a --limit) does not replace
    # the run's own step 0
    other = EvalJob.objects.create(model_spec=f"base:{run.model_name}", status="finished")
    EvalResult.objects.create(job=other, benchmark=Benchmark.objects.get(name="gsm8k-660-1318"), scoring="math", n=10,
                              score=0.9, ci_low=0.8, ci_high=1.0, complete=True)
    again = {s["benchmark"]: s for s in _evals_chart(client, run)["series"]}
    assert again["gsm8k-660-1318"]["scores"][0] == 0.269
    # the evals pages show them too
    assert client.get(f"/evals/crossplay/{cross['id']}/").status_code == 200
    compare = client.get(f"/evals/compare/?run={run.pk}&benchmark=gsm8k-660-1318")
    assert compare.status_code == 200 and "38.0%" in compare.content.decode()
    # an imported benchmark holds no items: the launch form leaves it out and a launch says why
    picker = html.split('id="eval-benchmarks"')[1].split("</select>")[0]
    assert "gsm8k-660-1318 (" not in picker and "<option" in picker  # the benchmarks with items are offered
    from apps.evals.launch import EvalLaunchError, launch_eval

    with pytest.raises(EvalLaunchError, match="scores imported with a run folder.*questions file is not here"):
        launch_eval(benchmarks=["gsm8k-660-1318"], model="base:smollm2-135m-instruct", enqueue_job=False)


def test_a_live_runs_page_shows_its_web_evaluations(db, trained_folder, run_env, client, researcher, settings,
                                                    tmp_path):
    """A run of this site whose checkpoint and base model were evaluated by the web's eval jobs."""
    settings.BENCHMARKS_DIR = tmp_path / "benchmarks"
    from apps.evals import benchmarks as bench_service
    from apps.evals.jobs import execute_eval
    from apps.evals.launch import launch_eval

    bench_service.upload("arith", io.BytesIO("".join(
        json.dumps({"question": f"What is {a} + 1?", "answer": a + 1}) + "\n" for a in range(3)).encode()), "math")
    run = Run.objects.create(method="spice", model_name="tiny", config={}, owner=researcher, status="finished",
                             queue="cpu")
    ckpt = Checkpoint.objects.create(run=run, step=3, path=str(trained_folder / "checkpoints" / "step-000003"))
    for job in (launch_eval(benchmarks=["arith"], run=run, limit=3, max_new_tokens=3, enqueue_job=False),
                launch_eval(benchmarks=["arith"], checkpoint=ckpt.pk, limit=3, max_new_tokens=3, enqueue_job=False)):
        assert execute_eval(job.pk) == f"eval {job.pk} finished"
    CrossPlay.objects.create(run=run, status="finished", cells_done=4, matrix=[[0.5, 0.75], [0.25, 0.5]],
                             checkpoints=[{"id": None, "step": 0, "path": ""},
                                          {"id": ckpt.pk, "step": 3, "path": ckpt.path}])
    client.force_login(researcher)
    data = _evals_chart(client, run)
    [series] = data["series"]
    results = {(r.job.step or 0): r for r in EvalResult.objects.filter(job__run=run).select_related("job")}
    assert series["steps"] == [0, 3]
    assert series["scores"] == [results[0].score, results[3].score]
    assert series["ci_low"] == [results[0].ci_low, results[3].ci_low]
    assert (data["crossplay"]["rows"], data["crossplay"]["columns"]) == (["step 0", "step 3"], ["step 0", "step 3"])


def test_a_run_without_evaluations_has_no_evals_chart_card(db, client, researcher):
    run = Run.objects.create(method="grpo", model_name="tiny", config={}, status="finished")
    client.force_login(researcher)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'id="run-title">Run {run.pk} · grpo</h1>' in html and 'id="reward-chart"' in html
    assert "run-evals-chart-data" not in html


def test_the_run_page_draws_the_eval_chart_next_to_the_heatmap_in_a_browser(transactional_db, roles, researcher,
                                                                             folder, server, monkeypatch):
    """The imported run's page in chromium: one plotly trace per benchmark with its 95% error bars,
    and the cross-play heatmap beside it."""
    from tests.web.evals.test_browser import _session_cookie, _shot
    from tests.web.runs.test_live_page_browser import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API runs an event loop here
    _import(folder)
    run = Run.objects.get()
    cookie = _session_cookie(researcher, server)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_cookies([cookie])
        page = context.new_page()
        page.set_default_timeout(90_000)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/runs/{run.pk}/")
        page.wait_for_function("() => { const c = document.getElementById('run-evals-chart');"
                               " const h = document.getElementById('run-crossplay-heatmap');"
                               " return c.data && c.data.length === 2 && h.data && h.data.length === 1; }")
        traces = page.evaluate("document.getElementById('run-evals-chart').data.map(t => "
                               "({name: t.name, x: t.x, y: t.y, up: t.error_y.array, down: t.error_y.arrayminus}))")
        gsm = next(t for t in traces if t["name"] == "gsm8k-660-1318")
        assert gsm["x"] == [0, 2, 3]
        assert gsm["y"] == pytest.approx([26.9, 31.0, 38.0])
        assert gsm["up"] == pytest.approx([3.3, 4.0, 4.0]) and gsm["down"] == pytest.approx([3.2, 4.0, 4.0])
        heat = page.evaluate("(() => { const d = document.getElementById('run-crossplay-heatmap').data[0];"
                             " return {type: d.type, z: d.z, x: d.x, y: d.y}; })()")
        assert heat == {"type": "heatmap", "z": PASS, "x": ["base", "step 3"], "y": ["base", "step 3"]}
        # side by side: the heatmap starts right of the chart, on the same row
        chart, heatmap = (page.locator(f"#{i}").bounding_box() for i in ("run-evals-chart", "run-crossplay-heatmap"))
        assert heatmap["x"] >= chart["x"] + chart["width"] - 1 and abs(heatmap["y"] - chart["y"]) < 5
        _shot(page, "imported-run")
        assert not errors, errors
        browser.close()


def test_token_ids_go_to_postgres_as_one_array_literal(db):
    """Attempt.token_ids / loss_mask (IntArrayField): the driver gets one '{...}' text per row instead of
    a list that Django and the driver prepare element by element (what made storing a SPICE step's
    samples slow: 70 of 76 s for 1,280 attempts of 1,400 tokens), and reads them back unchanged."""
    from django.db import connection

    run = Run.objects.create(method="grpo", model_name="tiny", config={})
    rows = {"a": ([0, 2**31 - 1, -5], [0, 1, 1]), "b": ([], []), "c": ([1, None, 3], [1, None, 0])}
    sent = []

    def spy(execute, sql, params, many, context):
        sent.extend(params or [])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        Attempt.objects.bulk_create([Attempt(run=run, key=k, token_ids=t, loss_mask=m) for k, (t, m) in rows.items()])
    assert "{0,2147483647,-5}" in sent and "{0,1,1}" in sent and "{}" in sent
    assert not any(isinstance(p, list) and len(p) == 3 and p[0] == 0 for p in sent)
    assert {a.key: (a.token_ids, a.loss_mask) for a in Attempt.objects.filter(run=run)} == rows


EXAMPLES = sorted(p for p in (settings.BASE_DIR / "examples" / "runs").glob("*") if (p / "config.yaml").is_file()) \
    if (settings.BASE_DIR / "examples" / "runs").is_dir() else []


@pytest.mark.skipif(not EXAMPLES, reason="no run folder under examples/runs/")
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_shipped_example_runs_import_and_show_their_evaluations(db, example, client, researcher):
    """The GPU runs' folders that `make demo` imports (examples/runs/*/: no weights)."""
    summary = json.loads(_import(example, "--json"))
    run = Run.objects.get(pk=summary["run"])
    assert run.status == "finished" and run.imported_from == str(example.resolve())
    assert summary["metrics"] == len(_lines(example / "metrics.jsonl")) > 0
    lines = _lines(example / "evals.jsonl") if (example / "evals.jsonl").is_file() else []
    assert summary["evals"] == len({(r["step"], r["benchmark"]) for r in lines})
    # every shipped folder says what it was and what it showed (its notes.md), and is named after itself
    assert run.name == example.name and "**What it was.**" in run.notes and "**What it showed.**" in run.notes
    client.force_login(researcher)
    if lines:
        latest = {(r["step"], r["benchmark"]): r["score"] for r in lines}  # the last line of a pair wins
        series = _evals_chart(client, run)["series"]
        html = client.get(f"/runs/{run.pk}/").content.decode()
        assert 'id="run-evals-chart"' in html
        assert ('id="run-crossplay-heatmap"' in html) == (example / "crossplay.json").is_file()
        assert {(step, s["benchmark"]): score for s in series for step, score in zip(s["steps"], s["scores"])} \
            == latest


@pytest.mark.skipif(not EXAMPLES, reason="no run folder under examples/runs/")
def test_every_shipped_control_names_the_run_it_controls():
    """A control folder (train.control set) carries a ``control_of`` file naming its run's folder beside it, so
    `make demo` links the two and the run's row shows its gain over the control (a missing one leaves it unlinked)."""
    controls = [p for p in EXAMPLES if (yaml.safe_load((p / "config.yaml").read_text()).get("train") or {})
                .get("control", "none") != "none"]
    assert controls
    for folder in controls:
        named = folder / "control_of"
        assert named.is_file(), f"{folder.name}: no control_of file"
        assert (folder.parent / named.read_text().strip() / "config.yaml").is_file(), folder.name


def test_an_imported_run_is_named_after_its_folder_with_its_notes_md(db, folder):
    (folder / "notes.md").write_text("GRPO on arithmetic, 3 steps.\n\nShowed: nothing learned at this size.\n")
    _import(folder)
    run = Run.objects.get()
    assert run.name == folder.name and run.notes.startswith("GRPO on arithmetic, 3 steps.")
    assert run.label == f"run {run.pk} · {folder.name}"
    run.describe(name="tiny arithmetic GRPO", tags=["smoke"])
    (folder / "notes.md").write_text("rewritten")
    _import(folder)  # a second import keeps what a researcher wrote
    run.refresh_from_db()
    assert (run.name, run.tags, run.notes.startswith("GRPO on arithmetic")) == ("tiny arithmetic GRPO", ["smoke"], True)


def _bare_folder(root, name, lines):
    folder = root / name
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump({"method": "spice", "model": {"name_or_path": "Qwen/Qwen2.5-0.5B"},
                                                        "train": {"steps": 5}}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_an_imported_run_was_created_when_it_ran_not_when_it_was_imported(db, tmp_path, client, researcher):
    """Run.created_at of an imported run is the earliest wall_clock of its metrics.jsonl (seconds since the epoch);
    a folder without one keeps the import's time. /runs/ shows and sorts by it, live runs still first."""
    from datetime import datetime, timedelta
    from datetime import timezone as dt_timezone

    from django.utils import timezone

    ran = 1795878014.25
    old = _bare_folder(tmp_path, "ran-earlier", [
        {"step": 2, "role": "solver", "loss": 0.4, "wall_clock": ran + 60},
        {"step": 1, "role": "schedule", "wall_clock": ran}, {"step": 1, "role": "solver", "loss": 0.5},
        {"step": 3, "role": "schedule", "wall_clock": "soon"}])  # not a number: ignored
    plain = _bare_folder(tmp_path, "no-clock", [{"step": 1, "role": "solver", "loss": 0.5}])
    before = timezone.now()
    _import(old)
    _import(plain)
    run = Run.objects.get(imported_from=str(old))
    assert run.created_at == datetime.fromtimestamp(ran, tz=dt_timezone.utc)
    assert Run.objects.get(imported_from=str(plain)).created_at >= before  # no wall_clock: the import's time
    _import(old)  # imported again: still when it ran
    assert Run.objects.get(pk=run.pk).created_at == datetime.fromtimestamp(ran, tz=dt_timezone.utc)
    live = Run.objects.create(method="spice", model_name="m", status="running", config={}, total_steps=5,
                              created_at=timezone.now() - timedelta(days=30))
    client.force_login(researcher)
    ids = [r.pk for r in client.get("/runs/").context["runs"]]
    assert ids == [live.pk, Run.objects.get(imported_from=str(plain)).pk, run.pk]  # live first, then newest
    ids = [r.pk for r in client.get("/runs/?sort=newest").context["runs"]]
    assert ids == [Run.objects.get(imported_from=str(plain)).pk, run.pk, live.pk]
