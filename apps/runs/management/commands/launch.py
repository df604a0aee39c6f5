"""manage.py launch METHOD --corpus NAME --model NAME_OR_PATH [--config FILE.yaml] [--set key=value ...] [--wait]
[--queue gpu|cpu] [--user NAME] [--reuse-active]

Validates like the web (same trainer config classes), queues the run and prints its id. With
--wait it blocks until the run ends and exits non-zero unless it finished. The command line is
the server operator's: the web's model-directory rule does not apply here.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from apps.accounts.schema import SchemaCommand
from apps.jobs.lifecycle import QueueUnavailable
from apps.jobs.waiting import no_worker_warning, worker_gone
from apps.runs.models import ACTIVE, ENDED, IllegalTransition, Run, Status
from apps.runs.services.launch import LaunchError, launch
from apps.runs.services.lifecycle import reap_stale_runs
from trainer.config import METHOD_NAMES, ConfigError, read_yaml


class Command(SchemaCommand):
    help = "Launch a training run (queued for a worker); prints the run id."

    def add_arguments(self, parser):
        parser.add_argument("method", choices=METHOD_NAMES, help="Training method.")
        parser.add_argument("--model", default=None, help="Bundled model name, folder under the models dir, or path "
                                                          "(default: the config's model.name_or_path).")
        parser.add_argument("--corpus", default=None, help="Corpus name (needed by every method but grpo).")
        parser.add_argument("--config", default=None, help="YAML file of config keys (overrides the defaults).")
        parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                            help="Override one key, e.g. --set train.steps=4 (repeatable; applied after --config).")
        parser.add_argument("--queue", choices=["gpu", "cpu"], default=None,
                            help="Queue (default: cpu when train.device is cpu, else gpu).")
        parser.add_argument("--user", default=None, help="Owner's username (default: none).")
        parser.add_argument("--reuse-active", action="store_true",
                            help="If a run of this method on this corpus is queued, running or paused, print its id "
                                 "instead of launching another (make demo uses it).")
        parser.add_argument("--control", choices=["random-reward"], default=None,
                            help="Also launch the run's control: the same config with train.control set (its id "
                                 "goes to stderr).")
        parser.add_argument("--wait", action="store_true", help="Block until the run ends; exit 1 unless it finished.")
        parser.add_argument("--poll", type=float, default=2.0, help="Seconds between status checks with --wait.")

    def handle(self, *args, method, model, corpus, config, overrides, queue, user, wait, poll, reuse_active,
               control=None, **options):
        data = _read_yaml(config) if config else {}
        owner = _user(user) if user else None
        active = Run.objects.filter(method=method, corpus__name=corpus or "", status__in=ACTIVE).order_by("-id").first()
        if reuse_active and active is not None and active.status == Status.RUNNING and worker_gone(active.worker_name):
            # its worker stopped moments ago (a restarted `make demo`): the heartbeat reaper would fail it within
            # RUN_HEARTBEAT_SECONDS, after this launch had reused it and left it to die
            try:
                active.mark_failed(f"its worker {active.worker_name} stopped; resume to continue from the last "
                                   "checkpoint", resumable=True)
                self.stderr.write(f"run {active.pk} had lost its worker ({active.worker_name}): marked failed "
                                  "(resumable); launching another")
            except IllegalTransition:  # the reaper (or the run's end) changed it meanwhile
                pass
            active.refresh_from_db()  # decide on what it is now
            if active.status not in ACTIVE:
                active = None
        if reuse_active and active is not None:
            self.stderr.write(f"run {active.pk} ({method} on {corpus}) is already {active.status}; not launching another")
            self.stdout.write(str(active.pk))
            if wait:
                self._wait(active, poll)
            return
        try:
            run = launch(method, model, corpus, config=data, overrides=overrides, user=owner, web=False, queue=queue,
                         control=control)
        except LaunchError as exc:
            raise CommandError("invalid launch:\n" + "\n".join(f"  {p or 'config'}: {m}" for p, m in exc.problems))
        except QueueUnavailable as exc:
            raise CommandError(str(exc))
        for warning in launch_warnings(run):
            self.stderr.write(f"warning: {warning}")
        for twin in run.controls.all():
            self.stderr.write(f"run {twin.pk}: its {twin.config['train']['control']} control")
        self.stdout.write(str(run.pk))
        self.stdout.flush()
        if wait:
            self._wait(run, poll)

    def _wait(self, run: Run, poll: float) -> None:
        step = -1
        while True:
            run.refresh_from_db()
            if run.current_step != step:
                step = run.current_step
                self.stderr.write(f"run {run.pk}: {run.status} step {step}/{run.total_steps}")
            if run.status in ENDED:
                break
            reap_stale_runs()
            time.sleep(poll)
        if run.status != Status.FINISHED:
            self.stderr.write(f"run {run.pk} {run.status}: {run.error or 'see its events'}")
            sys.exit(1)
        self.stderr.write(f"run {run.pk} finished at step {run.current_step}")


def _read_yaml(path: str) -> dict:
    """The --config file's mapping, read as the trainer reads a config file; CommandError naming what is wrong."""
    try:
        return read_yaml(Path(path))
    except ConfigError as exc:
        raise CommandError("cannot read --config: " + "; ".join(msg for _, msg in exc.problems)) from None


def _user(name: str):
    try:
        return get_user_model().objects.get(username=name)
    except get_user_model().DoesNotExist:
        raise CommandError(f"no user named {name!r}")


def launch_warnings(run: Run) -> list[str]:
    """What the operator should know about a queued run: no worker serves its queue yet. (Its files were checked at
    launch: every file field names a file of the datasets folder, which all workers share.)"""
    out = []
    waiting = no_worker_warning(run.queue)
    if waiting:
        out.append(f"run {run.pk}: {waiting}")
    return out
