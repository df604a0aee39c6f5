"""API keys of run configs (apps/runs/sealed.py): typed into the API, the launch form or
``manage.py launch``, a judge endpoint's key is stored encrypted; no page, API answer, export,
event or trainer file shows it; the run's worker still hands the real key to the endpoint.

The endpoint is a real HTTP server in the test that records the Authorization header it gets
from the trainer's own client (trainer.judge), built from the config exactly as the SSP recipe
builds it from what the run job prepares.

The workers' own key ($SELFPLAY_JUDGE_API_KEY, env:NAME) goes only to the endpoints of
settings.SELFPLAY_JUDGE_ENDPOINTS: refused at launch, and refused again by the worker's client.
"""
from __future__ import annotations

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from rest_framework.test import APIClient

from apps.corpora.models import Corpus
from apps.runs.jobs import _config_for_worker
from apps.runs.models import Run
from apps.runs.sealed import SecretError, open_for_worker
from trainer.config import ConfigError, load_config, save_config
from trainer.endpoints import KeyNotAllowed
from trainer.judge import key_env, make_judge

pytestmark = pytest.mark.django_db

KEY = "sk-test-5f3a9c1e-do-not-leak"
HARNESS_KEY = "sk-harness-77e0b2-do-not-leak"
OPERATOR_KEY = "sk-operator-9c41d0-do-not-leak"
PUBLIC = "https://93.184.216.34/v1"  # a public address literal: nothing is sent at launch


@pytest.fixture(autouse=True)
def _no_operator_key(monkeypatch):
    """No operator key from the machine running the tests (tests/conftest.py restores the endpoint list)."""
    monkeypatch.delenv("SELFPLAY_JUDGE_API_KEY", raising=False)


@pytest.fixture
def endpoint():
    """An OpenAI-compatible /chat/completions that records the Authorization headers it gets."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"choices": [{"message": {"content": "yes"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1", seen
    server.shutdown()


def _host(url: str) -> str:
    """The host:port entry of SELFPLAY_JUDGE_ENDPOINTS that lets the runs call the local test endpoint (an internal
    address: refused unless listed, trainer/endpoints.py destination_problem)."""
    return url.split("//")[1].split("/")[0]


@pytest.fixture
def listed(settings, endpoint):
    settings.SELFPLAY_JUDGE_ENDPOINTS = [_host(endpoint[0])]
    return endpoint


@pytest.fixture
def ssp_run(researcher, listed, rq_queues, django_capture_on_commit_callbacks):
    """An SSP run launched through the API with the judge's key typed in (and a SCORE-style key as --set)."""
    Corpus.objects.create(name="secret-corpus")
    url, _ = listed
    client = APIClient()
    client.force_authenticate(researcher)
    config = {"train": {"steps": 2, "device": "cpu"},
              "ssp": {"judge": "endpoint", "judge_endpoint": url, "judge_model": "judge", "judge_api_key": KEY}}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/runs/", {"method": "ssp", "model": "smollm2-135m-instruct",
                                                 "corpus": "secret-corpus", "config": config}, format="json")
    assert response.status_code == 201, response.content
    assert KEY not in response.content.decode()
    return Run.objects.get(pk=response.json()["id"])


def _texts(run) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT config::text, overrides::text FROM runs_run WHERE id = %s", [run.pk])
        config, overrides = cursor.fetchone()
    events = " ".join(run.events.values_list("message", flat=True))
    return config + overrides + events


def test_the_key_is_stored_sealed_not_plain(ssp_run):
    stored = ssp_run.config["ssp"]["judge_api_key"]
    assert stored.startswith("sealed:") and KEY not in _texts(ssp_run)
    assert stored in _texts(ssp_run)  # the texts read are those that hold the key, sealed
    assert ssp_run.overrides["config"]["ssp"]["judge_api_key"].startswith("sealed:")


def test_no_page_api_answer_or_export_shows_the_key(ssp_run, researcher, tmp_path):
    sealed = ssp_run.config["ssp"]["judge_api_key"]
    api = APIClient()
    api.force_authenticate(researcher)
    detail = api.get(f"/api/v1/runs/{ssp_run.pk}/")
    assert detail.status_code == 200
    assert detail.json()["config"]["ssp"]["judge_api_key"] == "<hidden>"
    assert detail.json()["config"]["ssp"]["judge_endpoint"].startswith("http://127.0.0.1")  # the rest is shown
    answers = [detail, api.get("/api/v1/runs/"), api.get(f"/api/v1/runs/{ssp_run.pk}/export/config.jsonl")]
    pages = Client()
    pages.force_login(researcher)
    answers += [pages.get(f"/runs/{ssp_run.pk}/"), pages.get("/runs/"), pages.get("/")]
    bodies = []
    for response in answers:
        assert response.status_code == 200
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert KEY.encode() not in body and sealed.encode() not in body, response.request["PATH_INFO"]
        assert b"secret-corpus" in body, response.request["PATH_INFO"]  # the run is shown, its key is not
        bodies.append(body)
    exported = json.loads(bodies[2])
    assert json.loads(exported["config"])["ssp"]["judge_api_key"] == "<hidden>"
    out = tmp_path / "config.jsonl"
    call_command("export", str(ssp_run.pk), "--kind", "config", "-o", str(out))
    assert KEY not in out.read_text() and sealed not in out.read_text() and "<hidden>" in out.read_text()


def test_the_worker_hands_the_real_key_to_the_endpoint_and_writes_only_a_reference(ssp_run, endpoint, tmp_path):
    url, seen = endpoint
    cfg = load_config(_config_for_worker(ssp_run))  # what the run job gives trainer.run
    assert cfg.ssp.judge_api_key == f"env:SELFPLAY_RUN{ssp_run.pk}_SSP_JUDGE_API_KEY"
    save_config(cfg, tmp_path / "config.yaml")  # the run folder's and every checkpoint's config.yaml
    assert KEY not in (tmp_path / "config.yaml").read_text()
    # the SSP recipe's own call (trainer/methods/ssp.py)
    judge = make_judge(None, cfg.ssp.judge, cfg.ssp.judge_endpoint, cfg.ssp.judge_model,
                       api_key_env=key_env(cfg.ssp.judge_api_key))
    assert judge.equivalent("What is 2+2?", "4", "four") is not None
    assert seen and set(seen) == {f"Bearer {KEY}"}


def test_a_set_override_and_the_launch_command_seal_the_key_too(researcher, rq_queues, django_capture_on_commit_callbacks,
                                                                 listed, capsys):
    url, _ = listed
    with django_capture_on_commit_callbacks(execute=True):
        call_command("launch", "score", "--corpus", Corpus.objects.create(name="c2").name, "--model",
                     "smollm2-135m-instruct", "--set", "train.steps=2", "--set", "train.device=cpu",
                     "--set", "score.meta_harness=endpoint", "--set", f"score.harness_endpoint={url}",
                     "--set", f"score.harness_api_key={HARNESS_KEY}")
    run = Run.objects.latest("id")
    out = capsys.readouterr().out
    assert HARNESS_KEY not in _texts(run) and HARNESS_KEY not in out
    assert run.config["score"]["harness_api_key"] in _texts(run) and out.split() == [str(run.pk)]  # it printed the id
    assert run.config["score"]["harness_api_key"].startswith("sealed:")
    assert any(s.startswith("score.harness_api_key=sealed:") for s in run.overrides["set"])
    cfg = load_config(_config_for_worker(run))
    assert os.environ[key_env(cfg.score.harness_api_key)] == HARNESS_KEY


def test_an_env_reference_is_kept_as_given(researcher, rq_queues, django_capture_on_commit_callbacks):
    Corpus.objects.create(name="c3")
    client = APIClient()
    client.force_authenticate(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/runs/", {"method": "ssp", "model": "smollm2-135m-instruct", "corpus": "c3",
                                                 "config": {"train.device": "cpu",
                                                            "ssp.judge_api_key": "env:MY_JUDGE_API_KEY"}}, format="json")
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.config["ssp"]["judge_api_key"] == "env:MY_JUDGE_API_KEY"
    assert client.get(f"/api/v1/runs/{run.pk}/").json()["config"]["ssp"]["judge_api_key"] == "env:MY_JUDGE_API_KEY"


def test_the_launch_form_takes_the_key_as_a_password_and_never_echoes_it(researcher):
    Corpus.objects.create(name="c4")
    client = Client()
    client.force_login(researcher)
    page = client.get("/runs/new/?method=ssp")
    assert b'type="password" name="cfg__ssp__judge_api_key"' in page.content
    refused = client.post("/runs/new/", {"method": "ssp", "model": "smollm2-135m-instruct", "corpus": "c4",
                                         "cfg__train__steps": "0", "cfg__ssp__judge_api_key": KEY})
    assert refused.status_code == 400 and b"errorlist" in refused.content
    assert KEY.encode() not in refused.content


def test_a_key_sealed_under_another_secret_key_fails_clearly_unless_it_is_a_fallback(ssp_run):
    sealed = ssp_run.config["ssp"]["judge_api_key"]
    from django.conf import settings

    old = settings.SECRET_KEY
    with override_settings(SECRET_KEY="a-new-secret-key-" + "x" * 40, SECRET_KEY_FALLBACKS=[]):
        with pytest.raises(SecretError, match="SECRET_KEY_FALLBACKS"):
            open_for_worker(ssp_run.config, ssp_run.pk)
    with override_settings(SECRET_KEY="a-new-secret-key-" + "x" * 40, SECRET_KEY_FALLBACKS=[old]):
        opened = open_for_worker({"ssp": {"judge_api_key": sealed}}, ssp_run.pk)
    assert opened["ssp"]["judge_api_key"].startswith("env:")


def test_the_standalone_trainer_refuses_a_plain_key_without_echoing_it():
    with pytest.raises(ConfigError) as exc:
        load_config({"method": "ssp", "model": {"name_or_path": "x"}, "ssp": {"judge_api_key": KEY}})
    assert "env:NAME" in str(exc.value) and KEY not in str(exc.value)
    with pytest.raises(ValueError, match="sealed by the web server"):
        key_env("sealed:abc")


@pytest.mark.parametrize("url", [f"http://judge:{KEY}@127.0.0.1:9/v1", f"https://127.0.0.1:9/v1?api-key={KEY}"])
def test_an_endpoint_url_carrying_a_credential_is_refused_without_echoing_it(researcher, url):
    Corpus.objects.create(name="c5")
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "ssp", "model": "smollm2-135m-instruct", "corpus": "c5",
                                             "config": {"ssp": {"judge": "endpoint", "judge_endpoint": url,
                                                                "judge_model": "j"}}}, format="json")
    assert response.status_code == 400 and "ssp.judge_endpoint" in response.json()["fields"]
    assert "_api_key" in response.json()["error"] and KEY not in response.content.decode()
    assert not Run.objects.exists()


def test_the_token_page_is_not_cached(researcher):
    client = Client()
    client.force_login(researcher)
    page = client.get("/accounts/token/")
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]


def test_error_reports_do_not_show_a_typed_in_key(researcher, rf):
    """Django's error report (the DEBUG page, mailed reports) masks the form's key field, and a
    launch failing inside launch() shows no key in its frames' variables."""
    import sys

    from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

    from apps.runs.services.launch import LaunchError, launch

    client = Client()
    client.force_login(researcher)
    response = client.post("/runs/new/", {"method": "ssp", "model": "smollm2-135m-instruct", "corpus": "none",
                                          "cfg__ssp__judge_api_key": KEY})
    shown = SafeExceptionReporterFilter().get_post_parameters(response.wsgi_request)
    assert shown["cfg__ssp__judge_api_key"] != KEY and shown["model"] == "smollm2-135m-instruct"
    try:
        launch("ssp", "smollm2-135m-instruct", "no-such-corpus", config={"ssp": {"judge_api_key": KEY}},
               overrides=[f"score.harness_api_key={KEY}"], user=researcher)
    except LaunchError:
        report = ExceptionReporter(rf.post("/api/v1/runs/"), *sys.exc_info()).get_traceback_text()
    assert "launch" in report and KEY not in report


@pytest.mark.parametrize("value", ["env:DATABASE_URL", "env:SECRET_KEY", "env:SELFPLAY_RUN1_SSP_JUDGE_API_KEY",
                                   "sealed:gAAAAABcopiedfromanotherrun"])
def test_the_web_refuses_references_to_other_secrets(researcher, value):
    """Through the web a run may name only a key variable (..._API_KEY) of the worker: any other
    variable, or a sealed value copied from another run, would be sent to the run's endpoint."""
    Corpus.objects.create(name="c6")
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "ssp", "model": "smollm2-135m-instruct", "corpus": "c6",
                                             "set": [f"ssp.judge_api_key={value}"]}, format="json")
    assert response.status_code == 400 and "ssp.judge_api_key" in response.json()["fields"], response.content
    assert not Run.objects.exists()


def test_the_command_line_may_name_any_variable(researcher, rq_queues, django_capture_on_commit_callbacks):
    from apps.runs.services.launch import launch

    Corpus.objects.create(name="c7")
    with django_capture_on_commit_callbacks(execute=True):
        run = launch("ssp", "smollm2-135m-instruct", "c7", config={"train": {"device": "cpu"}},
                     overrides=["ssp.judge_api_key=env:MY_KEY"], user=researcher, web=False)
    assert run.config["ssp"]["judge_api_key"] == "env:MY_KEY"


# ---- the workers' own key goes only to the operator's endpoints (SELFPLAY_JUDGE_ENDPOINTS) --------

def _launch_ssp(user, url, key_ref=None, corpus="allow-c"):
    Corpus.objects.get_or_create(name=corpus)
    client = APIClient()
    client.force_authenticate(user)
    ssp = {"judge": "endpoint", "judge_endpoint": url, "judge_model": "judge"}
    if key_ref:
        ssp["judge_api_key"] = key_ref
    return client.post("/api/v1/runs/", {"method": "ssp", "model": "smollm2-135m-instruct", "corpus": corpus,
                                         "config": {"train": {"steps": 2, "device": "cpu"}, "ssp": ssp}}, format="json")


def _judge_for(run):
    """The SSP recipe's judge, built from what the run job gives the trainer (trainer/methods/ssp.py)."""
    cfg = load_config(_config_for_worker(run))
    return make_judge(None, cfg.ssp.judge, cfg.ssp.judge_endpoint, cfg.ssp.judge_model,
                      api_key_env=key_env(cfg.ssp.judge_api_key), retries=0)


@pytest.mark.parametrize("allowed", [[], ["https://api.example.org/v1"]])
@pytest.mark.parametrize("key_ref", [None, "env:SELFPLAY_JUDGE_API_KEY", "env:OTHER_API_KEY"])
def test_a_launch_sending_the_workers_key_off_the_list_is_refused_clearly(researcher, endpoint, allowed, key_ref):
    _, seen = endpoint
    with override_settings(SELFPLAY_JUDGE_ENDPOINTS=allowed):
        response = _launch_ssp(researcher, PUBLIC, key_ref)  # a public address: may be called, but not with that key
    assert response.status_code == 400, response.content
    why = response.json()["fields"]["ssp.judge_endpoint"]
    assert "SELFPLAY_JUDGE_ENDPOINTS" in why and "ssp.judge_api_key" in why and "https://" in why
    assert ("lists no endpoint" if not allowed else "does not list it") in why
    assert f"${key_env(key_ref)}" in why
    assert not Run.objects.exists() and seen == []


def test_the_launch_form_says_the_same(researcher, endpoint):
    url, _ = endpoint
    Corpus.objects.create(name="form-c")
    from apps.runs.forms import LaunchForm

    client = Client()
    client.force_login(researcher)
    form = LaunchForm("ssp")
    data = {name: form[name].value() for name in form.fields if name.startswith("cfg__")}  # as a browser posts it
    data = {name: "on" if v is True else ("" if v is None else v) for name, v in data.items() if v is not False}
    data.update({"method": "ssp", "model": "smollm2-135m-instruct", "corpus": "form-c", "cfg__train__steps": "2",
                 "cfg__train__device": "cpu", "cfg__ssp__judge": "endpoint", "cfg__ssp__judge_endpoint": url,
                 "cfg__ssp__judge_model": "judge"})
    page = client.post("/runs/new/", data)
    errors = re.findall(r'id="id_cfg__ssp__judge_endpoint_error"><li>(.*?)</li>', page.content.decode(), re.S)
    assert page.status_code == 400 and len(errors) == 1 and "SELFPLAY_JUDGE_ENDPOINTS" in errors[0], page.content
    assert not Run.objects.exists()


def test_a_listed_endpoint_gets_the_workers_key(researcher, endpoint, rq_queues, django_capture_on_commit_callbacks,
                                                monkeypatch):
    url, seen = endpoint
    monkeypatch.setenv("SELFPLAY_JUDGE_API_KEY", OPERATOR_KEY)
    with override_settings(SELFPLAY_JUDGE_ENDPOINTS=[url]):  # a URL prefix (http://127.0.0.1:<port>/v1)
        with django_capture_on_commit_callbacks(execute=True):
            response = _launch_ssp(researcher, url)
        assert response.status_code == 201, response.content
        judge = _judge_for(Run.objects.get(pk=response.json()["id"]))
    assert judge.equivalent("What is 2+2?", "4", "four") is not None
    assert seen and set(seen) == {f"Bearer {OPERATOR_KEY}"}


def test_the_worker_refuses_the_key_for_an_endpoint_taken_off_the_list(researcher, endpoint, rq_queues, monkeypatch,
                                                                       django_capture_on_commit_callbacks):
    """Launched while listed, run after the operator removed the endpoint (or a run stored before
    the list existed): the worker's own client refuses, and the endpoint never sees the key."""
    url, seen = endpoint
    host = url.split("//")[1].split("/")[0]
    monkeypatch.setenv("SELFPLAY_JUDGE_API_KEY", OPERATOR_KEY)
    with override_settings(SELFPLAY_JUDGE_ENDPOINTS=[host]):  # a host:port entry
        with django_capture_on_commit_callbacks(execute=True):
            response = _launch_ssp(researcher, url)
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    with override_settings(SELFPLAY_JUDGE_ENDPOINTS=["https://api.example.org/v1"]):
        with pytest.raises(KeyNotAllowed) as exc:
            _judge_for(run)
    assert "SELFPLAY_JUDGE_ENDPOINTS" in str(exc.value) and "$SELFPLAY_JUDGE_API_KEY" in str(exc.value)
    assert OPERATOR_KEY not in str(exc.value) and seen == []


def test_a_researchers_own_key_still_goes_to_their_own_endpoint(researcher, endpoint, rq_queues, monkeypatch,
                                                                django_capture_on_commit_callbacks):
    url, seen = endpoint
    monkeypatch.setenv("SELFPLAY_JUDGE_API_KEY", OPERATOR_KEY)
    # the local endpoint is listed only because it is an internal address; the key sent is the run's own
    with override_settings(SELFPLAY_JUDGE_ENDPOINTS=["https://api.example.org/v1", _host(url)]):
        with django_capture_on_commit_callbacks(execute=True):
            response = _launch_ssp(researcher, url, KEY)  # typed in: sealed, the run's own
        assert response.status_code == 201, response.content
        judge = _judge_for(Run.objects.get(pk=response.json()["id"]))
    assert judge.equivalent("What is 2+2?", "4", "four") is not None
    assert seen and set(seen) == {f"Bearer {KEY}"}  # never the operator's


def test_a_harness_endpoint_is_checked_too(researcher):
    Corpus.objects.create(name="harness-c")
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.post("/api/v1/runs/", {"method": "score", "model": "smollm2-135m-instruct",
                                             "corpus": "harness-c",
                                             "set": ["score.meta_harness=endpoint",
                                                     "score.harness_endpoint=https://researcher.example.net/v1"]},
                           format="json")
    assert response.status_code == 400
    assert "SELFPLAY_JUDGE_ENDPOINTS" in response.json()["fields"]["score.harness_endpoint"]


def test_a_bad_endpoint_list_stops_the_server_with_what_is_wrong():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import django; django.setup()"], capture_output=True, text=True,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "selfplay_web.settings",
                               "SELFPLAY_JUDGE_ENDPOINTS": "ftp://files.example.org"}, timeout=120)
    assert proc.returncode != 0 and "ImproperlyConfigured" in proc.stderr
    assert "SELFPLAY_JUDGE_ENDPOINTS entry 'ftp://files.example.org'" in proc.stderr
