"""API keys in run configs: never stored, shown, exported or logged in plain text.

A key field of a run config (``SECRET_PATHS``: the SSP judge's and the SCORE meta-harness's
endpoint keys) holds a reference, never the key (trainer.method_configs.check_key_ref):

- ``env:NAME``: the worker reads the key from its environment variable NAME; nothing secret
  is stored anywhere;
- typed into the launch form, the API or ``manage.py launch``, the key itself is *sealed* at
  launch (``seal_inputs``): encrypted with Fernet under a key derived from SECRET_KEY
  (SECRET_KEY_FALLBACKS still open keys sealed before a rotation) and stored as
  ``sealed:<token>`` in the run's config and overrides.

The run job opens it (``open_for_worker``) into its own process environment (RQ forks one work
horse per job; the GPU ranks it starts inherit it) and hands the trainer an ``env:`` reference,
so config.yaml, checkpoints and launch.json hold only the variable's name. Whatever shows a
config (the API, the export, the admin) passes it through ``redact``.
"""
from __future__ import annotations

import base64
import copy
import os

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.utils.crypto import salted_hmac

SECRET_PATHS = ("ssp.judge_api_key", "score.harness_api_key")
SEALED, ENV = "sealed:", "env:"
HIDDEN = "<hidden>"


class SecretError(Exception):
    """A sealed key that cannot be opened; the message says what to do."""


def _fernet() -> MultiFernet:
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([Fernet(base64.urlsafe_b64encode(
        salted_hmac("selfplay.sealed", "run-config-api-keys", secret=k, algorithm="sha256").digest()))
        for k in keys])


def seal(plain: str) -> str:
    return SEALED + _fernet().encrypt(plain.encode("utf-8")).decode("ascii")


def unseal(value: str) -> str:
    try:
        return _fernet().decrypt(value[len(SEALED):].encode("ascii")).decode("utf-8")
    except (InvalidToken, ValueError, UnicodeError):
        raise SecretError("the run's sealed API key cannot be opened (SECRET_KEY changed without keeping the old one "
                          "in SECRET_KEY_FALLBACKS?); launch a new run with the key, or give it as env:NAME") from None


def _plain(value) -> bool:
    """A key typed in (to be sealed), not a reference."""
    return isinstance(value, str) and bool(value) and not value.startswith((ENV, SEALED))


def _walk(node: dict, change, prefix: str = "") -> dict:
    """A copy of a (nested and/or dotted) config with ``change(path, value)`` applied at SECRET_PATHS."""
    out = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if path in SECRET_PATHS:
            value = change(path, value)
        elif isinstance(value, dict):
            value = _walk(value, change, path + ".")
        out[key] = copy.deepcopy(value) if isinstance(value, (dict, list)) else value
    return out


def seal_inputs(config, overrides):
    """(config, overrides) as given to a launch, with every typed-in key sealed."""
    from trainer.config import parse_override

    if isinstance(config, dict):
        config = _walk(config, lambda _, v: seal(v) if _plain(v) else v)
    if not isinstance(overrides, (list, tuple)):
        return config, overrides
    out = []
    for text in overrides:
        try:
            parts, value = parse_override(text)
        except (ValueError, TypeError):
            out.append(text)  # the launch reports the bad override
            continue
        path = ".".join(parts)
        out.append(f"{path}={seal(value)}" if path in SECRET_PATHS and _plain(value) else text)
    return config, out


def redact(config):
    """A copy of a stored config for showing: sealed (and any plain) keys become ``<hidden>``;
    ``env:NAME`` references stay (a variable's name is no secret)."""
    if not isinstance(config, dict):
        return config
    return _walk(config, lambda _, v: v if isinstance(v, str) and v.startswith(ENV) else (HIDDEN if v else v))


def redact_overrides(overrides):
    """The stored overrides (``{"config": {...}, "set": ["k=v", ...]}``) for showing."""
    if not isinstance(overrides, dict):
        return overrides
    out = {**overrides, "config": redact(overrides.get("config"))}
    if isinstance(overrides.get("set"), list):
        out["set"] = [_redact_set(s) for s in overrides["set"]]
    return out


def _redact_set(text):
    if not isinstance(text, str) or "=" not in text:
        return text
    key, value = text.split("=", 1)
    return f"{key}={HIDDEN}" if key.strip() in SECRET_PATHS and not value.strip().startswith(ENV) else text


def env_name(run_id: int, path: str) -> str:
    return f"SELFPLAY_RUN{run_id}_{path.upper().replace('.', '_')}"


def open_for_worker(config: dict, run_id: int) -> dict:
    """The worker's copy of a stored config: each sealed key is opened into this process's
    environment and replaced by its ``env:`` reference (SecretError when it cannot be opened)."""
    def change(path, value):
        if isinstance(value, str) and value.startswith(SEALED):
            name = env_name(run_id, path)
            os.environ[name] = unseal(value)
            return ENV + name
        return value

    return _walk(config, change)
