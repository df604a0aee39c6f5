"""Launching a run: validate with the trainer's own config classes, create the Run, queue its job.

One path for the form, the API and ``manage.py launch``::

    run = launch(method="grpo", model="smollm2-135m-instruct", corpus=None,
                 config={"train": {"steps": 4}}, overrides=["train.lr=2e-6"], user=request.user)

``config`` is a dict of overrides, nested (``{"train": {"lr": 1e-6}}``) or dotted
(``{"train.lr": 1e-6}``); ``overrides`` are ``key.path=value`` strings (the CLI's ``--set``).
Every problem is reported at once as ``LaunchError.problems`` = [(key path, message)], the
paths being the trainer's (``train.lr``) or the launch fields (``method``, ``corpus``, ``queue``).

Web and API launches (``web=True``) are guarded: the model must be a bundled name, a folder
of the models directory (``settings.MODELS_DIR``) or a path inside it; ``model.trust_remote_code: true``
needs the ``allow_remote_code`` permission. Every launch (web, API and ``manage.py launch``) checks every
file field of the config (``data.path``, ``ssp.answers_path``, ``score.queries_path``, ``corpus.path``:
trainer/paths.py) against the datasets folder ``settings.DATASETS_DIR``; the worker checks again.

A launch with ``control="random-reward"`` creates two runs: the one asked for and its control, the same config
with ``train.control: random-reward`` (``Run.control_of`` points from the control to the run).

Queue: a run goes to the ``cpu`` queue when its config says ``train.device: cpu``, else to
``gpu``; an explicit ``queue`` ("cpu" | "gpu") wins. Workers choose what they serve
(``rqworker gpu`` on GPU hosts, ``rqworker cpu`` anywhere; uploads and CPU evaluations go to
``short``, served by a worker of its own: apps/jobs/waiting.py tells what a queued job waits for).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.views.decorators.debug import sensitive_variables

from apps.accounts.roles import can
from apps.corpora.models import Corpus
from apps.runs.models import Run, RunEvent
from apps.runs.sealed import endpoint_problems, seal_inputs
from apps.runs.services.lifecycle import enqueue
from trainer.config import METHOD_NAMES, Config, ConfigError, load_config
from trainer.method_configs import SECTIONS
from trainer.paths import config_path_problems, file_fields

QUEUES = ("gpu", "cpu")
CONTROLS = ("random-reward",)  # trainer.config.TrainConfig.control, "none" aside


class LaunchError(ValueError):
    """Everything wrong with a launch request: ``problems`` = [(key path, message)]."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in self.problems))

    def as_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for path, msg in self.problems:
            key = path or "config"
            out[key] = f"{out[key]}; {msg}" if key in out else msg
        return out


def expand_dotted(config: dict | None) -> dict:
    """{"train.lr": 1e-6, "model": {"lora.r": 8}} -> {"train": {"lr": 1e-6}, "model": {"lora": {"r": 8}}}."""
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        if isinstance(value, dict):
            value = expand_dotted(value)
        *parents, leaf = str(key).split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise LaunchError([(key, f"{part} is both a value and a section")])
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf] = _merge(node[leaf], value)
        else:
            node[leaf] = value
    return out


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def validate(method: str, model: str | None, corpus, config: dict | None = None, overrides: list[str] | None = None,
             user=None, web: bool = True, queue: str | None = None):
    """(trainer Config, Corpus or None, queue name) or LaunchError listing every problem."""
    problems: list[tuple[str, str]] = []
    if method not in METHOD_NAMES:
        raise LaunchError([("method", f"unknown method {method!r}; choose one of {', '.join(METHOD_NAMES)}")])
    if not isinstance(config or {}, dict):
        raise LaunchError([("config", "must be a mapping of config keys, e.g. {\"train\": {\"steps\": 10}}")])
    data = expand_dotted(config)
    given = data.pop("method", method)
    if given != method:
        problems.append(("method", f"config says method {given!r} but {method!r} was chosen; remove one"))
    model_given = (data.get("model") or {}).get("name_or_path") if isinstance(data.get("model"), dict) else None
    if model and model_given and model_given != model:
        problems.append(("model.name_or_path", f"model given twice ({model!r} and {model_given!r}); give it once"))
    if model:
        data = _merge(data, {"model": {"name_or_path": model}})
    elif not model_given:
        problems.append(("model.name_or_path", "choose a model: smollm2-135m-instruct, a folder under the "
                                               "models directory, or a path inside it"))
    cfg = None
    try:
        cfg = load_config({"method": method, **data}, overrides or [])
    except ConfigError as exc:
        problems += [(p, m) for p, m in exc.problems]
    corpus_obj = _corpus(method, corpus, problems)
    # the guards read the final values when the config is valid, else what was given (all problems at once)
    values = cfg.to_dict() if cfg is not None else _given(data, overrides)
    problems += [p for p in _guard(values, user, web) if p[0] not in {q[0] for q in problems}]
    if cfg is not None:  # a worker's own API key goes only to the operator's endpoints (apps/runs/sealed.py)
        problems += endpoint_problems(values)
    if queue not in (None, "", *QUEUES):
        problems.append(("queue", f"unknown queue {queue!r}; use gpu or cpu"))
    if problems:
        raise LaunchError(problems)
    return cfg, corpus_obj, queue or ("cpu" if cfg.train.device == "cpu" else "gpu")


def _corpus(method: str, corpus, problems: list):
    if corpus in (None, ""):
        if SECTIONS[method].needs_corpus:
            problems.append(("corpus", f"method {method} trains on a corpus; choose one (see /corpora/)"))
        return None
    if isinstance(corpus, Corpus):
        return corpus
    text = str(corpus).strip()
    found = Corpus.objects.filter(name=text).first()
    if found is None and text.isdecimal():
        found = Corpus.objects.filter(pk=int(text)).first()
    if found is None:
        names = ", ".join(Corpus.objects.values_list("name", flat=True)[:10]) or "none yet: create one at /corpora/"
        problems.append(("corpus", f"no corpus named {text!r}; known corpora: {names}"))
    return found


def _given(data: dict, overrides: list[str] | None) -> dict:
    from trainer.config import apply_overrides

    return apply_overrides(data, overrides or [])[0]


def _get(values: dict, dotted: str):
    for part in dotted.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return values


def _guard(values: dict, user, web: bool) -> list[tuple[str, str]]:
    """The web's rules: allowed model directories, files only from the datasets folder, remote code."""
    problems = []
    if _get(values, "model.trust_remote_code") is True and web and not can(user, "allow_remote_code"):
        problems.append(("model.trust_remote_code", "running model code from a checkpoint needs the "
                                                    "allow_remote_code permission (admin role); set it to false"))
    name = _get(values, "model.name_or_path")
    error = check_model(name, web) if isinstance(name, str) and name else None
    if error:
        problems.append(("model.name_or_path", error))
    if web and _get(values, "corpus.path"):
        problems.append(("corpus.path", "the web injects the chosen corpus; leave corpus.path empty"))
    # every file field (trainer/paths.py walks the schema), web and command line alike: the workers read only
    # the datasets folder, and check again before reading
    problems += [p for p in path_problems(values) if p[0] not in {q[0] for q in problems}]
    return problems


def path_problems(values: dict) -> list[tuple[str, str]]:
    """[(field, why)] for each file a config names outside the datasets folder (``settings.DATASETS_DIR``),
    or one that is missing there (the folder is every worker's: the run would fail later, on the worker)."""
    return config_path_problems(values, file_fields(Config), datasets_dir(), settings.DATA_DIR)


def datasets_dir() -> Path:
    return Path(settings.DATASETS_DIR)


def models_dirs() -> list[Path]:
    return [Path(settings.MODELS_DIR)]


def check_model(name: str, web: bool = True) -> str | None:
    """None when ``name`` resolves to a model (inside the allowed directories for the web), else why not."""
    from trainer.models import BUNDLED, ModelNotFound, part_files, resolve_model

    name = (name or "").strip()
    if "/" not in name and (Path(settings.MODELS_DIR) / name / "config.json").is_file():
        return None
    if name in BUNDLED:  # imported from its packages on first use, by the worker: are they all there?
        try:
            part_files(BUNDLED[name])
        except ModelNotFound as exc:
            return str(exc)
        return None
    try:
        resolve_model(name, allowed_dirs=models_dirs() if web else None)
    except ModelNotFound as exc:
        return str(exc)
    return None


def available_models() -> list[dict]:
    """The model catalog (``trainer.models.catalog``): the bundled models, installed or not, and the folders
    of the models directory, each with its sizes."""
    from trainer.models import catalog

    return catalog(Path(settings.MODELS_DIR))


def control_kind(control) -> str | None:
    """The control asked for (``CONTROLS``), None for none; LaunchError (field ``control``) for anything else."""
    if control in (None, "", "none", False):
        return None
    if control not in CONTROLS:
        raise LaunchError([("control", f"unknown control {control!r}; use {' or '.join(CONTROLS)}, or leave it out "
                                       "for no control run")])
    return control


@sensitive_variables("config", "overrides")  # may hold an API key until sealed (apps/runs/sealed.py)
def launch(method: str, model: str | None, corpus=None, config: dict | None = None,
           overrides: list[str] | None = None, user=None, web: bool = True, queue: str | None = None,
           control: str | None = None) -> Run:
    """Validate, create the Run (queued) and put its job on the queue. Raises LaunchError / QueueUnavailable.

    ``control="random-reward"`` also launches the run's control: the same config with ``train.control`` set (the
    answering role's reward a coin flip), linked by ``control_of`` (``run.controls``), on the same queue."""
    control = control_kind(control)
    config, overrides, refused = seal_inputs(config, overrides, web)  # a typed-in key is stored encrypted
    if refused:
        raise LaunchError(refused)
    cfg, corpus_obj, queue_name = validate(method, model, corpus, config, overrides, user, web, queue)
    twin_config = twin_cfg = None
    if control:
        if cfg.train.control != "none":
            raise LaunchError([("control", f"the config is a control run already (train.control: "
                                           f"{cfg.train.control}); launch it without a control, or set "
                                           "train.control to none")])
        twin_config = _merge(expand_dotted(config), {"train": {"control": control}})
        twin_cfg = validate(method, model, corpus, twin_config, overrides, user, web, queue)[0]
        if twin_cfg.train.control != control:  # a --set train.control=none after the config
            raise LaunchError([("train.control", f"set to {twin_cfg.train.control} by the overrides, so the "
                                                 f"{control} control would not be one; leave train.control out")])
    with transaction.atomic():
        run = _create(method, cfg, config, overrides, corpus_obj, user, queue_name)
        twin = (_create(method, twin_cfg, twin_config, overrides, corpus_obj, user, queue_name, control_of=run)
                if twin_cfg is not None else None)
    enqueue(run)
    if twin is not None:
        enqueue(twin)
    return run


def _create(method: str, cfg, config, overrides, corpus_obj, user, queue_name: str, control_of: Run | None = None):
    run = Run.objects.create(
        method=method, model_name=cfg.model.name_or_path, corpus=corpus_obj,
        corpus_name=corpus_obj.name if corpus_obj else "", config=cfg.to_dict(),
        overrides={"config": expand_dotted(config), "set": list(overrides or [])},
        owner=user if getattr(user, "is_authenticated", False) else None,
        total_steps=cfg.train.steps, queue=queue_name, control_of=control_of)
    run.run_dir = str(Path(settings.RUNS_DIR) / str(run.pk))
    run.save(update_fields=["run_dir"])
    who = getattr(user, "username", "") or "the command line"
    what = f" as the {cfg.train.control} control of run {control_of.pk}" if control_of is not None else ""
    RunEvent.objects.create(run=run, kind=RunEvent.Kind.STATUS, step=0,
                            message=f"queued on {queue_name} by {who}{what}", data={"to": "queued"})
    return run
