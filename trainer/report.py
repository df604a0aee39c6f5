"""``train.report_to``: the run's metrics also streamed to the tools researchers already watch (TRL's and
verl's ``report_to`` / ``logger``).

- ``tensorboard``: event files in ``<run folder>/tensorboard/`` (``torch.utils.tensorboard.SummaryWriter``, which
  needs the ``tensorboard`` package: ``pip install 'selfplay[tensorboard]'``); ``tensorboard --logdir <run folder>``
  shows them. One scalar per (role, metric): ``<role>/<name>`` at the step.
- ``wandb``: a W&B run named after the run folder, its files in ``<run folder>/wandb/``. Online only when W&B is
  reachable and a login is configured (``WANDB_API_KEY`` or ``wandb login``); otherwise offline, saying so, and
  ``wandb sync <run folder>/wandb/offline-run-*`` uploads it later. ``WANDB_MODE`` set by the user wins.
  ``pip install 'selfplay[wandb]'``. A resumed run continues the same W&B run (its id is kept in the folder).

Both are sinks (trainer/sink.py) beside the run folder's JSONL files; only rank 0 reports. A missing package is a
config error (``missing_package``, checked when the config is loaded) naming the extra to install.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse

from trainer.sink import NullSink

PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}  # report_to -> the module it needs (and its extra)


def missing_package(report_to: str) -> str | None:
    """What to install when ``report_to`` needs a package this Python lacks, else None."""
    module = PACKAGES.get(report_to)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return (f"report_to={report_to} needs the {module} package, which is not installed: "
            f"pip install 'selfplay[{report_to}]' (or set train.report_to=none)")


def make_reporter(cfg, run_dir: Path, resume: bool = False, stream=None):
    """The sink ``cfg.train.report_to`` asks for, or None for ``none``."""
    kind = cfg.train.report_to
    if kind == "tensorboard":
        return TensorBoardSink(run_dir / "tensorboard")
    if kind == "wandb":
        return WandbSink(cfg, run_dir, resume=resume, stream=stream)
    return None


def _scalars(values: dict):
    for name, value in sorted(values.items()):
        if name == "wall_clock" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        yield name, float(value)


class TensorBoardSink(NullSink):
    """``<role>/<name>`` scalars at each step, in TensorBoard event files under ``log_dir``."""

    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def metrics(self, step, role, values):
        for name, value in _scalars(values):
            self.writer.add_scalar(f"{role or 'run'}/{name}", value, step, walltime=values.get("wall_clock"))

    def samples(self, step, records):
        for r in records:
            if r.get("kind") == "event":
                self.writer.add_text("events", str(r.get("message", "")), step)

    def checkpoint(self, step, path):
        self.writer.flush()  # a checkpoint's step is on disk in the event file too

    def close(self):
        self.writer.close()


def wandb_reachable(timeout: float = 2.0) -> bool:
    """Whether W&B's server (WANDB_BASE_URL, default api.wandb.ai) answers a TCP connection."""
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def _logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode() -> tuple[str, str]:
    """(mode, why): the user's WANDB_MODE, else online when W&B is reachable and logged in, else offline."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"], "WANDB_MODE"
    if not wandb_reachable():
        return "offline", "no network to W&B"
    if not _logged_in():
        return "offline", "no W&B login (WANDB_API_KEY or `wandb login`)"
    return "online", "W&B reachable and logged in"


class WandbSink(NullSink):
    """One W&B run per run folder: ``<role>/<name>`` at each step, and the resolved config."""

    def __init__(self, cfg, run_dir: Path, resume: bool = False, stream=None):
        import wandb

        self.wandb = wandb
        self.mode, why = wandb_mode()
        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.exists() else uuid.uuid4().hex[:8]
        run_dir.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "selfplay", name=run_dir.name, id=run_id,
                              dir=str(run_dir), config=cfg.to_dict(), mode=self.mode, resume="allow",
                              settings=wandb.Settings(silent=True, console="off"))
        if self.mode == "offline":
            print(f"W&B offline ({why}): the run is in {run_dir / 'wandb'}; `wandb sync` uploads it later",
                  file=stream or sys.stderr)

    def metrics(self, step, role, values):
        self.run.log({f"{role or 'run'}/{name}": value for name, value in _scalars(values)}, step=step)

    def close(self):
        self.run.finish()
