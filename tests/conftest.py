"""Test bootstrap: real embedded Postgres+pgvector and real Redis (a separate Redis db).

`make test` starts the services first; starting them here too keeps `pytest` alone working.
"""
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# DeepSpeed's CPU shared-memory op (the ZeRO tests' all-reduce on gloo) is built by `make deepspeed` into the venv;
# without this, the first DeepSpeed test compiles it (about 2 CPU-minutes) into ~/.cache.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(__file__).resolve().parent.parent / ".venv" / "torch-extensions"))


# This process's own database sessions carry this name in pg_stat_activity, so that a test waiting for the sessions
# of the servers and workers it started to end (tests/fault/conftest.py wait_for_other_sessions_to_close) is not held
# by one of its own: a connection Django opens inside playwright's event loop belongs to that loop's context and is
# never closed, and each such session made every later browser test wait out the full 20 s in its teardown.
TEST_PROCESS_APP = "selfplay-pytest"


def pytest_configure(config):
    from django.conf import settings

    from selfplay_web import services

    services.start_all()  # selfplay_web/test_settings.py puts the tests on Redis db 9, away from the demo's db 0
    settings.DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = TEST_PROCESS_APP


# The tiers (markers registered in pyproject.toml). `make test` runs everything; `make test-fast` deselects these.
# A test gets a marker from what it uses, so a new test is tiered without anyone remembering to mark it.
_REAL_MODEL_FIXTURES = {"smollm2_dir"}
_DISTRIBUTED_FILES = ("test_multi_rank.py", "test_multi_rank_run.py", "test_deepspeed_engine.py", "test_rank_cleanup.py",
                      "test_worker_gpus.py")


def _source_of(item) -> str:
    import inspect

    try:
        return inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return ""


# `make test` deals whole files to its pytest-xdist workers in collection order (--no-loadscope-reorder), a file to
# whichever worker runs short: the files that take longest go first, so that no worker is left alone with one of
# them at the end. Measured on the 2-core CI machine kind; a file not named here keeps its place after these.
_LONGEST_FILES_FIRST = [
    "tests/trainer/test_multi_rank.py",
    "tests/trainer/test_compile.py",
    "tests/trainer/test_ssp.py",
    "tests/fault/test_ingest_killed.py",
    "tests/web/runs/test_bundled_resume.py",
    "tests/trainer/test_qwen05b.py",
    "tests/fault/test_rank_cleanup.py",
    "tests/web/methods/test_spice_ssp_pgvector.py",
    "tests/trainer/test_smollm2_e2e.py",
    "tests/web/runs/test_bundled_resume_browser.py",
    "tests/fault/test_worker_gpus.py",
    "tests/web/runs/test_runs_seed_groups.py",
    "tests/trainer/test_models.py",
    "tests/fault/test_worker_killed.py",
    "tests/web/runs/test_method_panel_browser.py",
    "tests/web/review/test_recipe_feedback.py",
    "tests/web/evals/test_jobs.py",
    "tests/web/runs/test_import_run.py",
    "tests/trainer/test_deepspeed_engine.py",
    "tests/trainer/test_spice.py",
]


def _longest_first(items) -> None:
    rank = {path: i for i, path in enumerate(_LONGEST_FILES_FIRST)}
    root = Path(__file__).resolve().parent.parent
    order = {id(item): rank.get(item.path.resolve().relative_to(root).as_posix(), len(rank)) for item in items}
    items.sort(key=lambda item: order[id(item)])  # stable: each file's tests, and the other files, keep their order


def pytest_collection_modifyitems(config, items):
    import pytest

    _longest_first(items)
    for item in items:
        path, source = item.path.name, _source_of(item)
        reasons = " ".join(str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
        if "browser" in path or "chromium" in reasons.lower() or "sync_playwright" in source or "chromium" in source:
            item.add_marker(pytest.mark.browser)
        if _REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) or path in ("test_qwen05b.py",
                                                                                    "test_smollm2_e2e.py"):
            item.add_marker(pytest.mark.real_model)
        if path in _DISTRIBUTED_FILES or '"gpus": 2' in source:
            item.add_marker(pytest.mark.distributed)
        if item.path.parent.name in ("fault", "robust") or "run_env" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)  # services killed and restarted, fuzzing, a worker training a run


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """SELFPLAY_TEST_DB_SUFFIX=x gives a test session its own database (test_selfplay_x), so
    sessions running side by side on one Postgres do not drop each other's database."""
    from django.conf import settings

    suffix = os.environ.get("SELFPLAY_TEST_DB_SUFFIX")
    if suffix:
        test = settings.DATABASES["default"].setdefault("TEST", {})
        test["NAME"] = f"{test.get('NAME') or 'test_selfplay'}_{suffix}"


@pytest.fixture(autouse=True)
def _environment_as_found():
    """A run job executed in-process sets variables for its trainer: SELFPLAY_DATA_DIR (execute_run; a later
    server subprocess derives its database address from it), SELFPLAY_DATASETS_DIR (execute_run) and
    SELFPLAY_JUDGE_ENDPOINTS (apps/runs/sealed.py: open_for_worker). Every test ends with them as it began."""
    names = ("SELFPLAY_DATA_DIR", "SELFPLAY_JUDGE_ENDPOINTS", "SELFPLAY_DATASETS_DIR")
    before = {name: os.environ.get(name) for name in names}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
