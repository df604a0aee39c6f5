"""Invalid run configs through every door: POST /api/v1/runs/, the launch form (/runs/new/),
``manage.py launch`` and ``python -m trainer run``. Each is refused with the key path of every
problem and a message saying what is wrong; never a 500 or a traceback, and no Run is created.

One table of config mistakes goes through the three doors that take a config dict or file (the
form has typed fields, so its own table follows); the web's guards (allowed model directories,
remote code, data files, corpus) and the doors' own input (bodies, files, arguments) after it.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.utils.html import escape
from rest_framework.test import APIClient

from apps.runs.models import Run

pytestmark = pytest.mark.django_db
MODEL = "smollm2-135m-instruct"
ROOT = Path(__file__).resolve().parents[2]

# (id, config dict, --set strings, key path that must be named, words of its message)
MISTAKES = [
    ("wrong-type", {"train": {"lr": "fast"}}, [], "train.lr", "valid number"),
    ("section-not-a-mapping", {"train": 5}, [], "train", "valid dictionary"),
    ("unknown-key", {"train": {"stepz": 3}}, [], "train.stepz", "unknown key; did you mean train.steps?"),
    ("unknown-section", {"trian": {"steps": 3}}, [], "trian", "unknown key"),
    ("unknown-nested-key", {"model": {"lora": {"rank": 8}}}, [], "model.lora.rank", "known keys here: r, alpha"),
    ("zero-steps", {"train": {"steps": 0}}, [], "train.steps", "greater than or equal to 1"),
    ("negative-lr", {"train": {"lr": -1e-6}}, [], "train.lr", "greater than 0"),
    ("top-p-above-1", {"rollout": {"top_p": 1.5}}, [], "rollout.top_p", "less than or equal to 1"),
    ("infinite-lr", {}, ["train.lr=.inf"], "train.lr", "finite number"),
    ("nan-temperature", {}, ["rollout.temperature=.nan"], "rollout.temperature", "finite number"),
    ("huge-seed", {"seed": 2**40}, [], "seed", "less than or equal to 4294967295"),
    ("unknown-choice", {"rollout": {"backend": "tpu"}}, [], "rollout.backend", "'hf' or 'vllm'"),
    ("empty-list", {"spice": {"formats": []}}, [], "spice.formats", "at least 1 item"),
    ("bad-list-item", {"spice": {"answer_types": ["integer", "poem"]}}, [], "spice.answer_types.1", "'integer'"),
    ("list-expected", {"eval": {"benchmarks": "gsm8k"}}, [], "eval.benchmarks", "valid list"),
    ("other-method-section", {"ssp": {}}, [], "ssp", "section for method 'ssp' given"),
    ("cross-check", {"rollout": {"min_new_tokens": 600, "max_new_tokens": 100}}, [], "rollout.min_new_tokens",
     "must not exceed rollout.max_new_tokens"),
    ("set-without-value", {}, ["train.lr"], "--set", "must look like key.path=value"),
    ("set-empty-key-part", {}, ["train..lr=1"], "--set", "empty key part"),
    ("set-below-a-leaf", {}, ["train.lr.x=1"], "train.lr", "valid number"),
    ("set-unknown", {}, ["train.warmup=3"], "train.warmup", "did you mean train.warmup_steps?"),
    ("int-of-a-string", {"train": {"steps": "ten"}}, [], "train.steps", "valid integer"),
    ("boolean-for-a-number", {"train": {"steps": True}}, ["rollout.group_size=yes"], "train.steps", "not true/false"),
    ("lora-rank-type", {"model": {"lora": {"r": [8]}}}, [], "model.lora.r", "valid integer"),
    ("unknown-detector", {"watchdog": {"pause_on": ["explode"]}}, [], "watchdog.pause_on.0", "'entropy_collapse'"),
]
IDS = [m[0] for m in MISTAKES]


def api(user, body):
    client = APIClient()
    client.force_authenticate(user)
    return client.post("/api/v1/runs/", body, format="json")


@pytest.mark.parametrize("case,config,sets,path,needle", MISTAKES, ids=IDS)
def test_api_names_the_key_path(researcher, kept_corpus, case, config, sets, path, needle):
    response = api(researcher, {"method": "spice", "model": MODEL, "corpus": "kept", "config": config, "set": sets})
    assert response.status_code == 400, response.content[:300]
    body = response.json()
    assert path in body["fields"] and needle in body["fields"][path], body
    assert body["error"].startswith("invalid launch: ") and path in body["error"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("case,config,sets,path,needle", MISTAKES, ids=IDS)
def test_manage_py_launch_names_the_key_path(kept_corpus, tmp_path, case, config, sets, path, needle):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(config))
    args = ["launch", "spice", "--model", MODEL, "--corpus", "kept", "--config", str(cfg)]
    with pytest.raises(CommandError) as err:
        call_command(*args, *[a for s in sets for a in ("--set", s)], stdout=io.StringIO())
    assert f"  {path}: " in str(err.value) and needle in str(err.value), str(err.value)
    assert not Run.objects.exists()


def trainer_cli(tmp_path, config: dict | str | bytes, sets=()) -> tuple[int, str]:
    """``python -m trainer run`` in this process (its main); returns (exit status, stderr)."""
    from trainer.__main__ import main

    cfg = tmp_path / "cfg.yaml"
    if isinstance(config, bytes):
        cfg.write_bytes(config)
    else:
        cfg.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        code = main(["run", str(cfg), "--out", str(tmp_path / "out"), *[a for s in sets for a in ("--set", s)]])
    finally:
        sys.stderr = old
    return code, err.getvalue()


@pytest.mark.parametrize("case,config,sets,path,needle", MISTAKES, ids=IDS)
def test_the_trainer_cli_names_the_key_path(tmp_path, case, config, sets, path, needle):
    code, err = trainer_cli(tmp_path, {"method": "spice", "corpus": {"path": "c.jsonl"}, **config}, sets)
    assert code == 2
    assert f"  {path}: " in err and needle in err, err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the launch form

FORM_MISTAKES = [
    # (POST fields over the defaults, form field that shows the error, words of the error)
    ({"cfg__train__steps": "ten"}, "cfg__train__steps", "Enter a whole number"),
    ({"cfg__train__steps": "0"}, "cfg__train__steps", "greater than or equal to 1"),
    ({"cfg__train__lr": "-1"}, "cfg__train__lr", "greater than 0"),
    ({"cfg__train__lr": "nan"}, "cfg__train__lr", "Enter a number"),
    ({"cfg__rollout__top_p": "7"}, "cfg__rollout__top_p", "less than or equal to 1"),
    ({"cfg__rollout__backend": "tpu"}, "cfg__rollout__backend", "Select a valid choice"),
    ({"cfg__spice__formats": "[mcq"}, "cfg__spice__formats", "valid list"),
    ({"cfg__spice__formats": "poem"}, "__all__", "spice.formats.0: "),
    ({"cfg__rollout__min_new_tokens": "900", "cfg__rollout__max_new_tokens": "10"}, "cfg__rollout__min_new_tokens",
     "must not exceed"),
    ({"cfg__seed": "99999999999"}, "cfg__seed", "less than or equal to 4294967295"),
    ({"model": "/etc"}, "model", "outside the allowed model directories"),
    ({"model": ""}, "model", "This field is required"),
    ({"corpus": ""}, "corpus", "trains on a corpus"),
    ({"corpus": "nope"}, "corpus", "Select a valid choice"),
    ({"cfg__model__trust_remote_code": "on"}, "cfg__model__trust_remote_code", "allow_remote_code permission"),
    ({"queue": "tpu"}, "queue", "Select a valid choice"),
]


@pytest.mark.parametrize("fields,field,needle", FORM_MISTAKES, ids=[f[1] + "-" + str(i) for i, f in enumerate(FORM_MISTAKES)])
def test_the_launch_form_shows_the_error_at_the_field(client, researcher, kept_corpus, fields, field, needle):
    client.force_login(researcher)
    response = client.post("/runs/new/?method=spice", {"method": "spice", "model": MODEL, "corpus": "kept", **fields})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors and any(needle in e for e in errors[field]), errors
    page = response.content.decode()
    assert escape(needle) in page and 'class="card launch-form"' in page  # the form again, with the error on it
    assert "Traceback" not in page
    assert not Run.objects.exists()


def test_the_launch_form_for_an_unknown_method_redirects_with_a_message(client, researcher):
    client.force_login(researcher)
    response = client.post("/runs/new/?method=ppo", {"model": MODEL}, follow=True)
    assert response.status_code == 200 and "Unknown method &#x27;ppo&#x27;" in response.content.decode()
    assert not Run.objects.exists()


# ---------------------------------------------------------------- guards and the doors' own input

@pytest.mark.parametrize("body,path,needle", [
    ({"method": "ppo", "model": MODEL}, "method", "unknown method 'ppo'"),
    ({"method": ["spice"], "model": MODEL}, "method", "unknown method"),
    ({"model": MODEL}, "method", "unknown method ''"),
    ({"method": "spice", "corpus": "kept"}, "model.name_or_path", "choose a model"),
    ({"method": "spice", "model": 5, "corpus": "kept"}, "model.name_or_path", "valid string"),
    ({"method": "spice", "model": "/etc", "corpus": "kept"}, "model.name_or_path", "outside the allowed model directories"),
    ({"method": "spice", "model": "../../etc", "corpus": "kept"}, "model.name_or_path", "outside the allowed"),
    ({"method": "spice", "model": MODEL}, "corpus", "trains on a corpus"),
    ({"method": "spice", "model": MODEL, "corpus": "nope"}, "corpus", "no corpus named 'nope'"),
    ({"method": "spice", "model": MODEL, "corpus": {"id": 1}}, "corpus", "no corpus named"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "queue": "tpu"}, "queue", "unknown queue 'tpu'"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "config": [1, 2]}, "config", "must be a mapping"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "config": {"method": "ssp"}}, "method", "config says method"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "config": {"model": {"trust_remote_code": True}}},
     "model.trust_remote_code", "allow_remote_code permission"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "config": {"corpus.path": "/tmp/c.jsonl"}}, "corpus.path",
     "the web injects the chosen corpus"),
    ({"method": "grpo", "model": MODEL, "config": {"data": {"path": "/etc/passwd"}}}, "data.path",
     "outside the datasets folder"),
    ({"method": "grpo", "model": MODEL}, "data.path", "needs a JSONL prompt set"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "set": "train.lr=1"}, "set", "must be a list"),
    ({"method": "spice", "model": MODEL, "corpus": "kept", "set": [1, 2]}, "set", "must be a list"),
])
def test_api_guards_and_bodies(researcher, kept_corpus, body, path, needle):
    response = api(researcher, body)
    assert response.status_code == 400, response.content[:300]
    fields = response.json()["fields"]
    assert path in fields and needle in fields[path], fields
    assert not Run.objects.exists()


@pytest.mark.parametrize("raw,content_type,status", [
    (b"[1, 2, 3]", "application/json", 400),
    (b"not json at all", "application/json", 400),
    (b'{"method": "spice", "config": {"train": {"lr": Infinity}}}', "application/json", 400),
    (b"method: spice", "application/x-yaml", 415),
])
def test_api_bodies_that_are_not_a_launch_are_4xx(researcher, raw, content_type, status):
    client = APIClient()
    client.force_authenticate(researcher)
    response = client.generic("POST", "/api/v1/runs/", raw, content_type=content_type)
    assert response.status_code == status and response.json()["error"], response.content[:300]
    assert not Run.objects.exists()


@pytest.mark.parametrize("content,needle", [
    (b"train: [unclosed", "is not valid YAML"),
    (b"\xff\xfe\x00garbage\x80", "is not UTF-8 text"),
    (b"- a list\n- not a mapping\n", "must hold a mapping"),
    (b"[" * 600 + b"]" * 600, "nests too deeply"),
])
@pytest.mark.parametrize("recursion_limit", [None, 5000])
def test_manage_py_launch_refuses_unreadable_config_files(kept_corpus, tmp_path, content, needle, recursion_limit):
    """Also in a process whose recursion limit something raised (torch's inductor sets 2000): the YAML parser then
    reads 600 levels without a RecursionError, and the depth is what refuses them."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit or before)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_bytes(content)
    try:
        with pytest.raises(CommandError, match=needle):
            call_command("launch", "spice", "--model", MODEL, "--corpus", "kept", "--config", str(cfg),
                         stdout=io.StringIO())
    finally:
        sys.setrecursionlimit(before)
    with pytest.raises(CommandError, match="cannot read --config"):
        call_command("launch", "spice", "--model", MODEL, "--config", str(tmp_path / "missing.yaml"))
    assert not Run.objects.exists()


def test_manage_py_launch_refuses_bad_arguments(kept_corpus):
    with pytest.raises(CommandError, match="invalid choice: 'ppo'"):
        call_command("launch", "ppo", "--model", MODEL)
    with pytest.raises(CommandError, match="corpus: no corpus named 'nope'"):
        call_command("launch", "spice", "--model", MODEL, "--corpus", "nope")
    with pytest.raises(CommandError, match="queue"):
        call_command("launch", "spice", "--model", MODEL, "--corpus", "kept", "--queue", "tpu")
    assert not Run.objects.exists()


@pytest.mark.parametrize("content,needle", [
    ("train: [unclosed", "is not valid YAML"),
    (b"\xff\xfe\x00garbage\x80", "is not UTF-8 text"),
    ("- a list\n", "must hold a mapping"),
    ("[" * 600 + "]" * 600, "nests too deeply"),
    ("method: ppo\n", "method: Input should be 'grpo'"),
    ("train: {steps: 3}\n", "method: required key is missing"),
])
def test_the_trainer_cli_refuses_unreadable_configs(tmp_path, content, needle):
    code, err = trainer_cli(tmp_path, content)
    assert code == 2 and needle in err, err


def test_the_trainer_cli_process_exits_2_without_a_traceback(tmp_path):
    """The real process: a binary config file gives exit status 2 and one clear message."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "trainer", "run", str(cfg)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 2 and "is not UTF-8 text" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_trainer_cli_fields_of_an_unknown_method_exit_2(capsys):
    from trainer.__main__ import main

    assert main(["fields", "ppo"]) == 2
    assert "method: unknown method 'ppo'; choose one of grpo, spice" in capsys.readouterr().err


def test_config_depth_is_measured_without_recursion():
    from trainer.config import MAX_CONFIG_DEPTH, nests_too_deeply

    deep = []
    for _ in range(5000):  # deeper than any recursion limit
        deep = [deep]
    assert nests_too_deeply(deep) and nests_too_deeply({"a": deep})
    ok = {"train": {"steps": 3, "schedule": [{"at": 1, "lr": [1e-6]}]}}
    assert not nests_too_deeply(ok)
    edge = 1
    for _ in range(MAX_CONFIG_DEPTH):
        edge = {"k": edge}
    assert not nests_too_deeply(edge) and nests_too_deeply({"k": edge})
