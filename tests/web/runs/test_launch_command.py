"""manage.py launch: prints the run id; --wait blocks until the run ends and exits 1 unless it finished."""
import io
import threading
import time

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import connection

from apps.runs.models import Run
from tests.web.runs.conftest import burst


def test_invalid_launches_name_the_key_path(db, tiny_grpo):
    model, _ = tiny_grpo
    with pytest.raises(CommandError, match=r"train\.lr: .*greater than 0"):
        call_command("launch", "grpo", "--model", model, "--set", "train.lr=-1", "--set", "data.path=x.jsonl")
    with pytest.raises(CommandError, match="corpus: method spice trains on a corpus"):
        call_command("launch", "spice", "--model", model)


@pytest.mark.django_db(transaction=True)
def test_it_prints_the_id_and_wait_exits_nonzero_when_the_run_fails(roles, tiny_grpo, run_env, tmp_path,
                                                                      tiny_model_dir):
    _, config = tiny_grpo
    bad = run_env / "prompts" / "empty.jsonl"
    bad.write_text("")
    config["data"] = {"path": str(bad)}
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump({"method": "grpo", **config}))
    out, outcome = io.StringIO(), {}

    def launch_and_wait():
        try:
            # the command line may name a model outside the models directory (the web may not)
            call_command("launch", "grpo", "--model", str(tiny_model_dir), "--config", str(cfg_file),
                         "--set", "train.steps=2", "--wait", "--poll", "0.1", stdout=out, stderr=io.StringIO())
            outcome["code"] = 0
        except SystemExit as exc:
            outcome["code"] = exc.code
        finally:
            connection.close()

    waiter = threading.Thread(target=launch_and_wait)
    waiter.start()
    deadline = time.monotonic() + 60
    while not Run.objects.exclude(job_id="").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    burst("cpu")
    waiter.join(timeout=60)
    run = Run.objects.get()
    assert out.getvalue().strip() == str(run.pk)
    assert run.status == "failed" and run.total_steps == 2 and run.model_name == str(tiny_model_dir)
    assert outcome["code"] == 1


def test_reuse_active_prints_the_running_demo_run_instead_of_launching(db, run_env):
    from apps.corpora.models import Corpus

    corpus = Corpus.objects.create(name="wiki")
    active = Run.objects.create(method="spice", model_name="tiny", config={}, corpus=corpus, status="running")
    out = io.StringIO()
    call_command("launch", "spice", "--corpus", "wiki", "--model", "tiny", "--reuse-active", stdout=out,
                 stderr=io.StringIO())
    assert out.getvalue().strip() == str(active.pk) and Run.objects.count() == 1


def test_reuse_active_replaces_a_running_run_whose_worker_stopped(db, run_env, private_redis):
    """A restarted `make demo` within the heartbeat limit: the old run's worker is gone (its Ctrl-C stopped it), so
    the run is failed (resumable) at once and a new one launched, instead of reusing a run nobody will finish."""
    import django_rq

    from apps.corpora.models import Corpus
    from apps.runs.workers import SelfplayWorker

    corpus = Corpus.objects.create(name="wiki")
    worker = SelfplayWorker([django_rq.get_queue("cpu")], connection=django_rq.get_connection("default"))
    worker.register_birth()
    try:
        active = Run.objects.create(method="spice", model_name="tiny", config={}, corpus=corpus, status="running",
                                    worker_name=worker.name)
        out = io.StringIO()
        call_command("launch", "spice", "--corpus", "wiki", "--model", "tiny", "--reuse-active", stdout=out,
                     stderr=io.StringIO())
        assert out.getvalue().strip() == str(active.pk) and Run.objects.count() == 1  # its worker lives: reused
    finally:
        worker.register_death()
    out, err = io.StringIO(), io.StringIO()
    call_command("launch", "spice", "--corpus", "wiki", "--model", "tiny", "--reuse-active", "--set",
                 "train.device=cpu", stdout=out, stderr=err)
    active.refresh_from_db()
    assert active.status == "failed" and active.resumable and f"its worker {worker.name} stopped" in active.error
    fresh = Run.objects.exclude(pk=active.pk).get()
    assert out.getvalue().strip() == str(fresh.pk) and fresh.status == "queued"
    assert f"run {active.pk} had lost its worker" in err.getvalue()


def test_a_missing_data_file_and_one_outside_the_datasets_folder_are_refused_at_launch(db, run_env, tiny_grpo,
                                                                                        tmp_path):
    model, _ = tiny_grpo
    missing = run_env / "prompts" / "nope.jsonl"  # inside the datasets folder, which every worker shares
    with pytest.raises(CommandError, match=r"data\.path: .*nope\.jsonl does not exist; put the file"):
        call_command("launch", "grpo", "--model", model, "--set", f"data.path={missing}", "--set", "train.device=cpu")
    elsewhere = tmp_path / "elsewhere.jsonl"  # the workers read only the datasets folder, whoever launches
    elsewhere.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    with pytest.raises(CommandError, match=r"data\.path: .*elsewhere\.jsonl is outside the datasets folder; put "
                                           r"the file in the datasets folder"):
        call_command("launch", "grpo", "--model", model, "--set", f"data.path={elsewhere}", "--set", "train.device=cpu")
    assert not Run.objects.exists()
