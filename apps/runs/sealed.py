"""API keys in run configs: never stored, shown, exported or logged in plain text.

A key field of a run config (``SECRET_PATHS``: the SSP judge's and the SCORE meta-harness's
endpoint keys) holds a reference, never the key (trainer.method_configs.check_key_ref):

- ``env:NAME``: the worker reads the key from its environment variable NAME; nothing secret
  is stored anywhere (through the web NAME must end in ``_API_KEY``: a run chooses its endpoint,
  so naming DATABASE_URL would send it there; a ``sealed:`` value is never taken from outside);
- typed into the launch form, the API or ``manage.py launch``, the key itself is *sealed* at
  launch (``seal_inputs``): encrypted with Fernet under a key derived from SECRET_KEY
  (SECRET_KEY_FALLBACKS still open keys sealed before a rotation) and stored as
  ``sealed:<token>`` in the run's config and overrides.

The run job opens it (``open_for_worker``) into its own process environment (RQ forks one work
horse per job; the GPU ranks it starts inherit it) and hands the trainer an ``env:`` reference,
so config.yaml, checkpoints and launch.json hold only the variable's name. Whatever shows a
config (the API, the export, the admin) passes it through ``redact``.

A key from the workers' own environment (``env:NAME``, or no key: ``$SELFPLAY_JUDGE_API_KEY``)
goes only to the operator's endpoints, ``settings.SELFPLAY_JUDGE_ENDPOINTS`` (trainer/endpoints.py):
a launch whose endpoint is elsewhere is refused (``endpoint_problems``), and the worker exports
the list to the trainer, whose client refuses to attach such a key anywhere else. A run's own
sealed key may go to any endpoint.
"""
from __future__ import annotations

import base64
import copy
import os
import re

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.utils.crypto import salted_hmac
from django.views.decorators.debug import sensitive_variables

SECRET_PATHS = ("ssp.judge_api_key", "score.harness_api_key")
# key path -> (endpoint path, the switch that makes the run call it, its value then)
KEY_ENDPOINTS = {"ssp.judge_api_key": ("ssp.judge_endpoint", "ssp.judge", "endpoint"),
                 "score.harness_api_key": ("score.harness_endpoint", "score.meta_harness", "endpoint")}
WEB_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*_API_KEY")
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


def _refused(path: str, value, web: bool) -> str | None:
    """Why a given reference is refused: a ``sealed:`` value is never taken from outside (it
    could be another run's key, sent to an endpoint of the sender's choosing); through the web
    an ``env:`` reference names a ``..._API_KEY`` variable, not any of the worker's variables
    (DATABASE_URL, SECRET_KEY would otherwise go to that endpoint as a bearer token)."""
    if not isinstance(value, str):
        return None
    if value.startswith(SEALED):
        return "a sealed key cannot be given; give the key itself or env:NAME"
    name = value[len(ENV):]
    if web and value.startswith(ENV) and (not WEB_ENV_NAME.fullmatch(name) or name.startswith("SELFPLAY_RUN")):
        return (f"env:{name} is not a key variable: through the web, env: names a worker variable ending in "
                "_API_KEY (e.g. env:SELFPLAY_JUDGE_API_KEY), or type the key itself")
    return None


@sensitive_variables("config", "overrides", "value")
def seal_inputs(config, overrides, web: bool = True):
    """(config, overrides, problems): the config and overrides as given to a launch, with every
    typed-in key sealed, and [(key path, why)] for each refused reference (the launch reports them)."""
    from trainer.config import parse_override

    problems = []

    def change(path, value):
        why = _refused(path, value, web)
        if why:
            problems.append((path, why))
        return seal(value) if _plain(value) else value

    if isinstance(config, dict):
        config = _walk(config, change)
    out = list(overrides) if isinstance(overrides, (list, tuple)) else overrides
    for i, text in enumerate(out if isinstance(out, list) else []):
        try:
            parts, value = parse_override(text)
        except (ValueError, TypeError):
            continue  # the launch reports the bad override
        path = ".".join(parts)
        if path in SECRET_PATHS:
            out[i] = f"{path}={change(path, value)}"
    return config, out, problems


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


def _get(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def endpoint_problems(config: dict) -> list[tuple[str, str]]:
    """[(endpoint path, why)] for each endpoint the run calls that is internal (loopback, private, link-local ...)
    and not in ``settings.SELFPLAY_JUDGE_ENDPOINTS``, whatever key it gets (trainer/endpoints.py:
    destination_problem), and each one called with a key from the workers' environment (``env:NAME`` or none
    given) that is not in that list."""
    from trainer.endpoints import ENV as LIST, completions_url, endpoint_allowed, parse_allow_list
    from trainer.judge import key_env

    from trainer.endpoints import destination_problem

    allowed = parse_allow_list(",".join(settings.SELFPLAY_JUDGE_ENDPOINTS))
    problems = []
    for key_path, (url_path, switch, value) in KEY_ENDPOINTS.items():
        url, ref = _get(config, url_path), _get(config, key_path)
        if _get(config, switch) != value or not isinstance(url, str) or not url:
            continue
        why = destination_problem(completions_url(url), allowed)  # keys or none: where a run may call at all
        if why:
            problems.append((url_path, why))
            continue
        if ref and not str(ref).startswith(ENV):
            continue  # the run's own key (sealed): the researcher's, for their endpoint
        if not endpoint_allowed(completions_url(url), allowed):
            listed = "lists no endpoint" if not allowed else "does not list it"
            problems.append((url_path, (
                f"this endpoint would get the workers' API key (${key_env(ref)}), and {LIST} {listed}: type your own "
                f"key for it into {key_path} (stored encrypted; any placeholder if the endpoint takes none), or ask "
                f"the operator to add the endpoint to {LIST} (comma-separated URL prefixes or hosts, "
                "e.g. https://api.example.org/v1)")))
    return problems


def open_for_worker(config: dict, run_id: int) -> dict:
    """The worker's copy of a stored config: each sealed key is opened into this process's
    environment and replaced by its ``env:`` reference (SecretError when it cannot be opened).
    The operator's endpoint list goes into the environment too: the trainer's client (and the
    GPU ranks, which inherit it) attach a worker key to no other endpoint."""
    from trainer.endpoints import ENV as LIST

    os.environ[LIST] = ",".join(settings.SELFPLAY_JUDGE_ENDPOINTS)

    def change(path, value):
        if isinstance(value, str) and value.startswith(SEALED):
            name = env_name(run_id, path)
            os.environ[name] = unseal(value)
            return ENV + name
        return value

    return _walk(config, change)
