"""trainer/paths.py: every file field of the config is declared as one, and the worker's check before reading."""
from __future__ import annotations

from typing import get_args, get_origin

import pytest
from pydantic import BaseModel

from trainer.config import Config
from trainer.methods.score import load_queries
from trainer.methods.ssp_tasks import load_answers
from trainer.paths import ENV, PathNotAllowed, check_config, check_file, file_fields
from trainer.tools.corpus import corpus_path

FILES = {"data.path", "corpus.path", "ssp.answers_path", "score.queries_path"}
# every other text field, and why it names no file the trainer reads
NOT_FILES = {
    "method": "a method name (a choice)",
    "model.name_or_path": "a model: checked against the models folder at launch (apps/runs/services/launch.check_model)",
    "grpo.prompt_key": "a JSON field name", "grpo.answer_key": "a JSON field name",
    "grpo.system_prompt": "prompt text",
    "ssp.judge_endpoint": "a URL (trainer/endpoints.py)", "score.harness_endpoint": "a URL (trainer/endpoints.py)",
    "ssp.judge_model": "a model name sent to the endpoint", "score.harness_model": "a model name sent to the endpoint",
    "ssp.judge_api_key": "env:NAME or sealed: (apps/runs/sealed.py)",
    "score.harness_api_key": "env:NAME or sealed: (apps/runs/sealed.py)",
    "watchdog.heldout_metric": "a metric name",
    "model.lora.target_modules": "module names", "score.must_include": "words the report must include",
    "score.dimension_pool": "dimension names", "scope.task_types": "task type names",
    "eval.benchmarks": "benchmark names, resolved to the Evals page's frozen sets (apps/evals/benchmarks.find)",
}


def _holds_text(annotation) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) is not None and str(get_origin(annotation)).endswith("Literal"):
        return False
    return any(_holds_text(a) for a in get_args(annotation))


def _text_fields(model: type[BaseModel] = Config, prefix: str = "") -> set[str]:
    out = set()
    for name, field in model.model_fields.items():
        sub = next((a for a in (field.annotation, *get_args(field.annotation))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None:
            out |= _text_fields(sub, f"{prefix}{name}.")
        elif _holds_text(field.annotation):
            out.add(f"{prefix}{name}")
    return out


def test_every_text_field_of_the_schema_is_a_declared_file_or_named_as_no_file():
    """A new field that may hold a path must be declared with file_field (then launch and worker check it) or be
    listed above with the reason it is no file: it cannot skip the datasets rule unnoticed."""
    text = _text_fields()
    assert set(file_fields(Config)) == FILES
    unclassified = text - FILES - set(NOT_FILES)
    assert not unclassified, f"declare these with trainer.paths.file_field or list them in NOT_FILES: {unclassified}"
    assert set(NOT_FILES) <= text | {"method"}, set(NOT_FILES) - text  # no stale entries


@pytest.fixture
def worker_env(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "datasets").mkdir(parents=True)
    (data / "secret_key").write_text("key\n")
    (data / "datasets" / "ok.txt").write_text("Paris\n")
    (data / "datasets" / "q.jsonl").write_text('{"query": "why?"}\n')
    (data / "datasets" / "c.jsonl").write_text('{"title": "t", "text": "x"}\n')
    monkeypatch.setenv(ENV, str(data / "datasets"))
    monkeypatch.setenv("SELFPLAY_DATA_DIR", str(data))
    return data


def test_the_readers_refuse_files_outside_the_datasets_folder_on_a_web_worker(worker_env):
    secret = str(worker_env / "secret_key")
    for reader, field in [(load_answers, "ssp.answers_path"), (load_queries, "score.queries_path"),
                          (corpus_path, "corpus.path")]:
        with pytest.raises(PathNotAllowed, match=rf"{field} .*secret_key is outside the datasets folder"):
            reader(secret)
    from trainer.data import load_prompt_set
    with pytest.raises(PathNotAllowed, match="data.path"):
        load_prompt_set("/etc/passwd")
    assert load_answers(str(worker_env / "datasets" / "ok.txt")) == ["Paris"]
    assert load_queries(str(worker_env / "datasets" / "q.jsonl")) == ["why?"]
    assert corpus_path(str(worker_env / "datasets" / "c.jsonl")).name == "c.jsonl"


def test_the_datasets_folder_itself_never_reaches_the_servers_own_files(tmp_path):
    """An operator who points the datasets folder at the data dir still cannot have its secrets read."""
    env = {ENV: str(tmp_path), "SELFPLAY_DATA_DIR": str(tmp_path)}
    (tmp_path / "pg").mkdir()
    (tmp_path / "pg" / "postgresql.conf").write_text("x")
    for name in ("secret_key", "admin_password", "pg/postgresql.conf", "models/m/config.json"):
        with pytest.raises(PathNotAllowed):
            check_file("data.path", str(tmp_path / name), env)
    check_file("data.path", str(tmp_path / "mine.jsonl"), env)


def test_a_run_refuses_the_whole_config_before_loading_anything(worker_env):
    cfg = Config.model_validate({"method": "ssp", "ssp": {"answer_source": "list",
                                                          "answers_path": str(worker_env / "secret_key")}})
    with pytest.raises(PathNotAllowed, match="ssp.answers_path"):
        check_config(cfg)


def test_the_standalone_trainer_is_unrestricted(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    (tmp_path / "a.txt").write_text("x\n")
    assert load_answers(str(tmp_path / "a.txt")) == ["x"]
