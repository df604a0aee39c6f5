"""Which files a run's config may name: one rule for every path-typed config field.

A config field that names a file the trainer reads (``data.path``, ``corpus.path``,
``ssp.answers_path``, ``score.queries_path``, and any added later) is declared with
``file_field(...)``: its schema carries ``{"kind": "file"}``, so ``file_fields(Config)`` finds every one
of them by walking the config classes (tests/trainer/test_paths.py fails when a str field is
neither declared as a file nor listed as not one).

Where the datasets folder is set (``$SELFPLAY_DATASETS_DIR``: the web server checks at launch,
its workers get the variable and check again before reading), such a path must be:

- absolute (``~`` expanded) and, with symlinks resolved, inside the datasets folder;
- none of the server's own files even then (``secret_key``, ``admin_password``, ``pg/``,
  ``redis/``, ``models/``, ``runs/``, ``uploads/`` of ``$SELFPLAY_DATA_DIR``: ``PROTECTED``);
- a regular file (not a folder, a FIFO or a device).

``bundled:NAME`` stays allowed for the fields whose reader knows bundled sets (``data.path``,
``corpus.path``). With the variable unset (the standalone trainer: whoever writes the config
owns the machine) nothing is restricted. This module imports nothing from Django or torch.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field

ENV = "SELFPLAY_DATASETS_DIR"
FILE = "file"
# the server's own files under $SELFPLAY_DATA_DIR: never a dataset, wherever the datasets folder is
PROTECTED = ("secret_key", "admin_password", "pg", "pg.url", "pg.lock", "redis", "models", "runs", "uploads")


class PathNotAllowed(PermissionError):
    """A config path outside the datasets folder (or one of the server's own files)."""


def file_field(default: Any = None, *, description: str, bundled: bool = False):
    """A config field naming a file the trainer reads; ``bundled``: ``bundled:NAME`` is allowed too."""
    return Field(default, description=description, json_schema_extra={"kind": FILE, "bundled": bundled})


def _extra(field) -> dict:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def file_fields(model, prefix: str = "") -> dict[str, bool]:
    """{dotted path: bundled allowed} of every file field of a config class (``trainer.config.Config``: all methods'
    sections), found by walking its fields."""
    from pydantic import BaseModel

    out: dict[str, bool] = {}
    for name, field in model.model_fields.items():
        sub = _submodel(field.annotation)
        if sub is not None and issubclass(sub, BaseModel):
            out.update(file_fields(sub, f"{prefix}{name}."))
        elif _extra(field).get("kind") == FILE:
            out[f"{prefix}{name}"] = bool(_extra(field).get("bundled"))
    return out


def _submodel(annotation):
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def protected_paths(data_dir: str | Path | None) -> list[Path]:
    if not data_dir:
        return []
    root = Path(data_dir).expanduser()
    return [root / name for name in PROTECTED]


def _within(real: Path, folder: Path) -> bool:
    try:
        folder = folder.expanduser().resolve()
    except (OSError, RuntimeError):
        return False
    return real == folder or folder in real.parents


def path_problem(field: str, value, datasets: str | Path, protected: list[Path] = (), bundled: bool = False,
                 must_exist: bool = True) -> str | None:
    """Why ``value`` may not be read for config field ``field`` (None when it may). The message names the
    field and where to put the file; it never says whether a path outside the datasets folder exists."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return f"{field} must be a file path (a string), got {type(value).__name__}"
    root = Path(datasets).expanduser()
    where = (f"put the file in the datasets folder {root} (the operator copies it there) and give its full "
             f"path, e.g. {root / (Path(value).name or 'file.jsonl')}")
    if "\x00" in value:
        return f"{field} contains a NUL byte; {where}"
    if bundled and value.startswith("bundled:"):
        return None  # the reader knows only its own bundled names
    path = Path(value).expanduser()
    if not path.is_absolute():
        return f"{field} {value!r} is a relative path; {where}"
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return f"{field} {value} cannot be resolved; {where}"
    if not _within(real, root) or any(_within(real, p) for p in protected):
        return f"{field} {value} is outside the datasets folder; {where}"
    if real.is_dir():
        return f"{field} {value} is a folder; give the file in it"
    if must_exist and not real.is_file():
        return (f"{field} {value} does not exist" if not real.exists() else
                f"{field} {value} is not a regular file") + f"; {where}"
    return None


def config_path_problems(values: dict, fields: dict[str, bool], datasets: str | Path,
                         data_dir: str | Path | None = None, must_exist: bool = True) -> list[tuple[str, str]]:
    """[(field, why)] for every file field (``file_fields(Config)``) of a config given as ``Config.to_dict()``."""
    problems = []
    for field, bundled in fields.items():
        node: Any = values
        for part in field.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        why = path_problem(field, node, datasets, protected_paths(data_dir), bundled, must_exist)
        if why:
            problems.append((field, why))
    return problems


def check_file(field: str, value, environ=None, bundled: bool = False) -> None:
    """The worker's check before reading ``value`` for ``field``: PathNotAllowed when
    ``$SELFPLAY_DATASETS_DIR`` is set and the path is not inside it (nothing when unset)."""
    environ = os.environ if environ is None else environ
    datasets = environ.get(ENV)
    if not datasets:
        return
    why = path_problem(field, str(value) if isinstance(value, Path) else value, datasets,
                       protected_paths(environ.get("SELFPLAY_DATA_DIR")), bundled, must_exist=False)
    if why:
        raise PathNotAllowed(why)


def check_config(cfg, environ=None) -> None:
    """The worker's check of a whole config (a ``Config``) before a run reads anything (PathNotAllowed listing
    every problem)."""
    environ = os.environ if environ is None else environ
    datasets = environ.get(ENV)
    if not datasets:
        return
    problems = config_path_problems(cfg.to_dict(), file_fields(type(cfg)), datasets, environ.get("SELFPLAY_DATA_DIR"),
                                    must_exist=False)
    if problems:
        raise PathNotAllowed("; ".join(why for _, why in problems))
