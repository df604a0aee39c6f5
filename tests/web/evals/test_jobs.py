"""Eval and cross-play jobs on tiny models: an evaluation of real checkpoints writes results with
intervals and samples; automatic evaluations follow the run's eval section; the cross-play job
fills its matrix; manage.py eval prints the results."""
from __future__ import annotations

import io
import json
import shutil

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.evals import benchmarks as bench_service
from apps.evals.jobs import execute_crossplay, execute_eval
from apps.evals.launch import EvalLaunchError, launch_crossplay, launch_eval
from apps.evals.models import CrossPlay, EvalJob, EvalResult, EvalSample
from apps.runs.models import Checkpoint, Run
from tests.web.runs.conftest import burst

ARITH = "".join(json.dumps({"question": f"What is {a} + 1?", "answer": a + 1}) + "\n" for a in range(5))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    """Two checkpoints (steps 1 and 2) of a tiny model trained by the real trainer (grpo)."""
    from trainer import run

    prompts = tmp_path_factory.mktemp("p") / "arith.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"{a}+1=", "answer": str(a + 1)}) + "\n" for a in range(4)))
    out = tmp_path_factory.mktemp("grpo-run")
    run({"method": "grpo", "seed": 0, "model": {"name_or_path": str(tiny_model_dir), "lora": {"r": 0}},
         "data": {"path": str(prompts)}, "reward": "exact", "rollout": {"max_new_tokens": 4, "group_size": 2},
         "train": {"steps": 2, "lr": 1e-3, "prompts_per_step": 2, "micro_batch_size": 4, "device": "cpu"},
         "checkpoint": {"every": 1, "keep_last": 2}}, run_dir=out)
    return out


@pytest.fixture
def run_with_checkpoints(db, researcher, trained, run_env):
    run = Run.objects.create(method="grpo", model_name="tiny", config={"method": "grpo"}, owner=researcher,
                             status="finished", queue="cpu")
    for step in (1, 2):
        Checkpoint.objects.create(run=run, step=step, path=str(trained / "checkpoints" / f"step-{step:06d}"))
    return run


@pytest.fixture
def arith(db, data_dir):
    return bench_service.upload("arith", io.BytesIO(ARITH.encode()), "math")


@pytest.fixture
def queued(transactional_db, roles):
    """Tests whose jobs go through Redis: django-rq enqueues on commit, so their rows must be committed."""


def test_an_eval_job_on_a_checkpoint_writes_results_with_intervals(queued, run_with_checkpoints, arith, researcher):
    ckpt = run_with_checkpoints.checkpoints.get(step=2)
    job = launch_eval(benchmarks=["arith", "aime2025"], checkpoint=ckpt.pk, limit=3, max_new_tokens=6,
                      user=researcher, queue="cpu")
    assert (job.status, job.step, job.run_id, job.queue) == ("queued", 2, run_with_checkpoints.pk, "evals")
    burst("evals")  # a real RQ worker of the evaluations runs it (an evaluation on the CPU never waits behind a run)
    job.refresh_from_db()
    assert job.status == "finished", job.error
    assert (job.done, job.total) == (6, 6)
    for result in EvalResult.objects.filter(job=job):
        assert result.complete and result.n == 3
        assert 0.0 <= result.ci_low <= result.score <= result.ci_high <= 1.0
        samples = list(result.samples.order_by("index"))
        assert [s.index for s in samples] == [0, 1, 2]
        assert all(s.question and s.gold and s.output is not None for s in samples)
        assert result.correct == sum(s.correct for s in samples)
    assert EvalSample.objects.get(result__job=job, result__benchmark__name="arith", index=0).gold == "1"


def test_a_base_model_eval_and_a_job_claimed_once(run_with_checkpoints, arith, researcher):
    job = launch_eval(benchmarks=["arith"], run=run_with_checkpoints, limit=2, max_new_tokens=4, enqueue_job=False)
    assert job.model_spec == "base:tiny" and job.step is None
    assert execute_eval(job.pk) == f"eval {job.pk} finished"
    assert "nothing to do" in execute_eval(job.pk)  # the atomic claim: a second worker does nothing
    assert EvalResult.objects.get(job=job).n == 2


def test_a_pruned_checkpoint_and_bad_requests_are_refused(run_with_checkpoints, arith, tmp_path):
    gone = Checkpoint.objects.create(run=run_with_checkpoints, step=9, path=str(tmp_path / "step-000009"))
    with pytest.raises(EvalLaunchError, match="no longer on disk"):
        launch_eval(benchmarks=["arith"], checkpoint=gone.pk)
    with pytest.raises(EvalLaunchError, match="unknown benchmark"):
        launch_eval(benchmarks=["nope"], model="base:tiny")
    with pytest.raises(EvalLaunchError, match="limit must be between 1"):
        launch_eval(benchmarks=["arith"], model="base:tiny", limit=0)
    with pytest.raises(EvalLaunchError, match="search needs a corpus"):
        launch_eval(benchmarks=["arith"], model="base:tiny", search=True)
    with pytest.raises(EvalLaunchError, match="outside the allowed model directories"):
        launch_eval(benchmarks=["arith"], model=f"base:{tmp_path}")


def test_a_failing_job_records_why(run_with_checkpoints, arith):
    ckpt = run_with_checkpoints.checkpoints.get(step=1)
    job = launch_eval(benchmarks=["arith"], checkpoint=ckpt, enqueue_job=False)
    shutil.copytree(ckpt.path, ckpt.path + ".bak")
    try:
        shutil.rmtree(ckpt.path)  # pruned between launch and run
        execute_eval(job.pk)
    finally:
        shutil.move(ckpt.path + ".bak", ckpt.path)
    job.refresh_from_db()
    assert job.status == "failed" and "checkpoint.keep_last" in job.error


def test_runs_evaluate_every_nth_checkpoint_automatically(queued, run_env, researcher, data_dir, tiny_grpo):
    from apps.runs.services.launch import launch

    bench_service.upload("arith", io.BytesIO(ARITH.encode()), "math")
    model, config = tiny_grpo
    config = {**config, "eval": {"every_checkpoints": 2, "benchmarks": ["arith"], "limit": 2, "max_new_tokens": 4},
              "checkpoint": {"every": 1, "keep_last": 4}}
    run = launch("grpo", model, None, config=config, user=researcher, queue="cpu")
    burst("cpu")  # the run; the evaluations its checkpoints queued go to evals, not behind it
    assert EvalJob.objects.filter(run=run, status="queued", queue="evals").count() == 2
    burst("evals")
    run.refresh_from_db()
    assert run.status == "finished", run.error
    jobs = list(EvalJob.objects.filter(run=run).order_by("step"))
    assert [j.step for j in jobs] == [2, 4] and all(j.auto for j in jobs)  # checkpoints 1..4, every 2nd
    assert all(j.status == "finished" for j in jobs), [(j.pk, j.status, j.error) for j in jobs]
    assert run.events.filter(message__startswith="automatic evaluation").count() == 2
    from apps.runs.sink import DjangoSink

    DjangoSink(run).checkpoint(4, jobs[-1].model_spec)  # the same checkpoint reported again (a resume)
    assert EvalJob.objects.filter(run=run).count() == 2


def test_the_eval_command_prints_one_line_per_benchmark(run_with_checkpoints, arith, capsys):
    ckpt = run_with_checkpoints.checkpoints.get(step=2)
    call_command("eval", ckpt.path, "--benchmark", "arith", "--limit", "2", "--max-new-tokens", "4")
    line = json.loads(capsys.readouterr().out.strip())
    assert line["benchmark"] == "arith" and line["n"] == 2 and line["ci_low"] <= line["score"] <= line["ci_high"]
    assert EvalJob.objects.get(pk=line["job"]).checkpoint_id == ckpt.pk  # linked to the run's checkpoint row
    with pytest.raises(CommandError, match="benchmarks: unknown benchmark"):
        call_command("eval", "base:tiny", "--benchmark", "nope")
    with pytest.raises(CommandError, match="neither base:<model name> nor a checkpoint"):
        call_command("eval", "/no/such/folder", "--benchmark", "arith")


# ---- cross-play ---------------------------------------------------------------------------------

DOC_TITLE, DOC_TEXT = "Arithmetic", "Two plus two is four. Three times three is nine. Numbers can be added and multiplied."


def _teach_player(tiny_model_dir, dest, doc, sec, own: tuple[str, str], answers: dict[str, str]):
    """A tiny model taught to write ``own`` (question, integer answer) as SPICE Challenger from ``doc``
    and to answer each question in ``answers`` with its boxed value as Reasoner."""
    from transformers import AutoTokenizer

    from tests.trainer.taught import pair, teach
    from trainer.methods.spice_tasks import (
        REASONER_SYSTEM, FormatChoice, SpiceTask, challenger_prompt, continue_chat, reasoner_prompt, task_prompt,
    )
    from trainer.prompts import chat

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    eos = [tok.eos_token_id]
    enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    choice = enc('{"suitable_for_mcq": false, "suitable_for_free_form": true, "best_answer_type": "Integer"}') + eos
    task = enc(json.dumps({"question": own[0], "answer": int(own[1]), "answer_type": "integer"})) + eos
    second = task_prompt(FormatChoice("free_form", "integer"), sec.worked_example)
    conversation = [(challenger_prompt(tok, doc, sec), False), (choice, True),
                    (continue_chat(tok, second, True), False), (task, True)]
    replies = [pair(chat(tok, REASONER_SYSTEM, reasoner_prompt(SpiceTask("free_form", "integer", q, "0"))),
                    enc(f"So \\boxed{{{a}}}") + eos) for q, a in answers.items()]
    return teach(tiny_model_dir, dest, [conversation, *replies], steps=400)


def test_the_crossplay_job_fills_the_matrix(queued, researcher, tiny_model_dir, run_env, tmp_path):
    from apps.corpora.models import Corpus, Document
    from apps.corpora.retriever import PgDocumentSource
    from trainer.evaluate import spice_section

    corpus = Corpus.objects.create(name="arith-docs")
    Document.objects.create(corpus=corpus, title=DOC_TITLE, text=DOC_TEXT, content_hash="h1")
    # the players are taught the task turn as JSON alone: the run's config says so (spice.think_before_task is on
    # by default and changes that turn's prompt)
    spice = {"max_document_tokens": 64, "format_max_new_tokens": 40, "think_before_task": False}
    run = Run.objects.create(method="spice", model_name="tiny", corpus=corpus, owner=researcher, queue="cpu",
                             config={"method": "spice", "spice": spice, "rollout": {"max_new_tokens": 40}})
    doc = PgDocumentSource(corpus).sample(1)[0]
    sec = spice_section(spice)
    easy, hard = ("What is two plus two?", "4"), ("What is three times three?", "9")
    early = _teach_player(tiny_model_dir, tmp_path / "early", doc, sec, easy, {easy[0]: "4", hard[0]: "6"})
    late = _teach_player(tiny_model_dir, tmp_path / "late", doc, sec, hard, {easy[0]: "4", hard[0]: "9"})
    ckpts = [Checkpoint.objects.create(run=run, step=s, path=str(p)) for s, p in ((10, early), (20, late))]

    job = launch_crossplay(run, [c.pk for c in reversed(ckpts)], n_tasks=2, answers_per_task=2, temperature=0.0,
                           queue="cpu")
    assert job.matrix == [[None, None], [None, None]] and job.steps == [10, 20]
    burst("evals")
    job.refresh_from_db()
    assert job.status == "finished", job.error
    assert [len(t["tasks"]) for t in job.tasks] == [2, 2]
    assert job.tasks[0]["tasks"][0]["question"] == easy[0] and job.tasks[1]["tasks"][0]["answer"] == "9"
    # rows: challenger (early, late); columns: solver (early, late)
    assert job.matrix == [[1.0, 1.0], [0.0, 1.0]] and job.cells_done == 4
    assert "nothing to do" in execute_crossplay(job.pk)


def test_crossplay_launch_checks(db, researcher, run_with_checkpoints):
    with pytest.raises(EvalLaunchError, match="has no corpus"):
        launch_crossplay(run_with_checkpoints, [c.pk for c in run_with_checkpoints.checkpoints.all()])
    from apps.corpora.models import Corpus

    run_with_checkpoints.corpus = Corpus.objects.create(name="c")
    run_with_checkpoints.save()
    with pytest.raises(EvalLaunchError, match="choose 1 to 8 checkpoints"):
        launch_crossplay(run_with_checkpoints, [])
    with pytest.raises(EvalLaunchError, match="no checkpoint '999999' of run"):
        launch_crossplay(run_with_checkpoints, ["999999"])
    assert CrossPlay.objects.count() == 0


def test_a_job_whose_worker_died_is_failed_by_the_reaper(run_with_checkpoints, settings):
    from datetime import timedelta

    from django.utils import timezone

    job = EvalJob.objects.create(model_spec="base:tiny", status="running", worker_name="w1",
                                 heartbeat_at=timezone.now() - timedelta(seconds=settings.RUN_HEARTBEAT_SECONDS + 5))
    fresh = EvalJob.objects.create(model_spec="base:tiny", status="running", heartbeat_at=timezone.now())
    assert EvalJob.reap_stale() == [job.pk]
    job.refresh_from_db()
    fresh.refresh_from_db()
    assert job.status == "failed" and "w1" in job.error and fresh.status == "running"


def test_an_automatic_eval_that_cannot_start_becomes_a_run_event(run_with_checkpoints):
    from apps.evals.launch import on_checkpoint

    run = run_with_checkpoints
    run.config = {"method": "grpo", "eval": {"every_checkpoints": 1, "benchmarks": ["no-such-set"]}}
    run.save()
    assert on_checkpoint(run.pk, 2, run.checkpoints.get(step=2).path) is None
    assert EvalJob.objects.count() == 0
    event = run.events.get()
    assert "automatic evaluation of step 2 not queued" in event.message and "no-such-set" in event.message
    run.config = {"method": "grpo"}  # no eval section: nothing happens
    run.save()
    assert on_checkpoint(run.pk, 2, "") is None and run.events.count() == 1


def test_an_eval_with_the_search_tool_searches_the_corpus(db, researcher, tiny_model_dir, run_env, data_dir,
                                                           tmp_path):
    """A tiny model taught to open with a search: the job's multi-turn rollout sends the query to the
    pgvector retriever of the chosen corpus and the sample keeps the turns and passages."""
    from transformers import AutoTokenizer

    from apps.corpora.ingest import ingest_documents
    from apps.corpora.models import Corpus
    from apps.corpora.parsing import ParsedDoc
    from tests.trainer.taught import pair, teach
    from trainer.evaluate import Item, prompt_messages
    from trainer.prompts import chat

    corpus = Corpus.objects.create(name="volcanoes")
    ingest_documents(corpus, [ParsedDoc("Volcanoes of Iceland", "Iceland sits on the Mid-Atlantic Ridge. The 2010 "
                                        "eruption of Eyjafjallajokull closed European airspace for days.", "v.txt")])
    question = "Which volcano closed European airspace in 2010?"
    bench_service.upload("iceland", io.BytesIO(json.dumps({"question": question, "answer": "Eyjafjallajokull"})
                                               .encode() + b"\n"), "exact")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = chat(tok, *prompt_messages(Item("0", question, "x"), "exact", search=True))
    model = teach(tiny_model_dir, run_env / "models" / "searcher",
                  [pair(prompt, tok.encode("<search> Iceland volcano eruption </search>", add_special_tokens=False))])
    job = launch_eval(benchmarks=["iceland"], model="base:searcher", search=True, corpus="volcanoes",
                      max_new_tokens=120, enqueue_job=False)
    assert model.name == "searcher" and job.corpus == corpus
    execute_eval(job.pk)
    job.refresh_from_db()
    assert job.status == "finished", job.error
    sample = EvalSample.objects.get(result__job=job)
    assert sample.data["searches"] == 1
    assert sample.data["turns"][0]["text"].strip().startswith("<search> Iceland volcano eruption </search>")
    assert sample.data["turns"][1]["role"] == "tool" and "Eyjafjallajokull" in sample.data["turns"][1]["text"]
    assert sample.data["passages"][0]["title"] == "Volcanoes of Iceland"
