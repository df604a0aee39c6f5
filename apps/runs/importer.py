"""Loading a standalone run folder into the web (``manage.py import_run DIR``).

A folder written by ``python -m trainer run CONFIG --out DIR`` (its files and the evaluation
files scripts add: trainer/runfolder.py) becomes a finished ``Run`` marked imported
(``imported_from`` = the folder's absolute path) with the method, model and full config of its
config.yaml, named after the folder and with the folder's notes.md (if any) as its notes. Its rows are
those a live run of this site has:

- metrics.jsonl and samples.jsonl go through the ``DjangoSink`` that stores a live run's reports
  (the same upserts into Metric and Task / Attempt / Rubric / Grade / RunEvent), with ``live=False``:
  no websocket messages, no review sampling;
- checkpoints.jsonl and the checkpoints/step-* folders become ``Checkpoint`` rows (the weights need
  not be here: a GPU run's stay on the GPU machine; only checkpoints on disk can be evaluated again);
- evals.jsonl, eval_samples/ and crossplay.json are the import hooks' (apps/runs/hooks.py): apps.evals
  makes them finished evaluations with their item samples and a cross-play matrix (apps/evals/imported.py).

Importing the same folder again updates that run in place: every write is an upsert on a natural
key (metric (run, step, role, name), sample (run, key), checkpoint (run, step), evaluation (run,
step, benchmark); an evaluation's item samples are replaced whole), so nothing is duplicated, and a folder that grew since (a resumed run, new
evaluations) adds what is new. The whole import is one transaction: a bad line leaves the database
as it was. Every problem is a ``RunImportError`` that names the file, the line and the fix.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone as dt_timezone
from pathlib import Path

from django.db import transaction

from apps.runs import hooks
from apps.runs.models import Checkpoint, Run, RunEvent, Status
from apps.runs.sink import DjangoSink
from trainer.runfolder import RunFolderError, check_run_folder, read_checkpoints, read_metrics, read_samples

IMPORTED_QUEUE = "imported"  # the queue name of imported runs and of their evaluations


class RunImportError(ValueError):
    """The folder cannot be imported; the message says what is wrong and how to fix it."""


@dataclass
class ImportSummary:
    run: Run
    created: bool
    metrics: int = 0  # metric lines read
    samples: int = 0
    checkpoints: int = 0
    evals: int = 0  # (step, benchmark) results
    eval_samples: int = 0  # their items (eval_samples/)
    crossplay: bool = False

    def what(self) -> str:
        """What was stored, in words: the run event's message and import_run's line."""
        return (f"{self.metrics} metric lines, {self.samples} samples, {self.checkpoints} checkpoints, "
                f"{self.evals} evaluations{f' ({self.eval_samples} item samples)' if self.eval_samples else ''}"
                f"{', a cross-play matrix' if self.crossplay else ''}")

    def as_dict(self) -> dict:
        return {"run": self.run.pk, "url": f"/runs/{self.run.pk}/", "created": self.created,
                "imported_from": self.run.imported_from, "method": self.run.method, "model": self.run.model_name,
                "steps": self.run.current_step, "metrics": self.metrics, "samples": self.samples,
                "checkpoints": self.checkpoints, "evals": self.evals, "eval_samples": self.eval_samples,
                "crossplay": self.crossplay}


def import_folder(path: str | Path, user=None, control_of: str | int | None = None) -> ImportSummary:
    """Create (or update, for a folder imported before) the Run of the run folder ``path``. ``control_of``: the run
    this folder is a control of (its id, or the folder it was imported from): the folder's config must be a control
    (``train.control`` set) of the same method and model; the link is kept when the folder is imported again.
    Without ``control_of``, a file ``control_of`` in the folder may name the run's folder beside it (one line, e.g.
    ``spice-gate-wiki-qwen15``), so ``make demo``'s import links a shipped control to its run in either order: a
    control imported before its run is imported unlinked, and linked when its run is imported."""
    try:
        folder = check_run_folder(path).resolve()
        cfg = _config(folder)
        named = folder / "control_of"
        if control_of in (None, "") and named.is_file():
            sibling = named.read_text(encoding="utf-8", errors="replace").strip()
            if not sibling or "/" in sibling or sibling.startswith("."):
                raise RunImportError(f"{named}: give the folder name of the run this is the control of, beside it")
            # linked when that run was imported before (make demo imports the folders in order); else imported alone
            if Run.objects.filter(imported_from=str((folder.parent / sibling).resolve())).exists():
                control_of = str(folder.parent / sibling)
        with transaction.atomic():
            summary = _import(folder, cfg, user)
            if control_of not in (None, ""):
                _link_control(summary.run, cfg, control_of)
            elif cfg.train.control == "none":
                _link_waiting_controls(folder, summary.run)
            return summary
    except RunFolderError as exc:
        raise RunImportError(str(exc)) from None


def _link_waiting_controls(folder: Path, run: Run) -> None:
    """Link to ``run`` the control folders beside ``folder`` whose ``control_of`` file names it and that were
    imported unlinked before it (``make demo`` imports `spice-gate-wiki-qwen15-control/` before
    `spice-gate-wiki-qwen15/`). A folder that cannot be linked (not a control, another model) stays unlinked: its
    own import says why when given --control-of."""
    for twin in Run.objects.filter(imported_from__startswith=str(folder.parent) + "/", control_of__isnull=True):
        sibling = Path(twin.imported_from)
        named = sibling / "control_of"
        if sibling.parent != folder.parent or sibling == folder or not named.is_file():
            continue
        if named.read_text(encoding="utf-8", errors="replace").strip() != folder.name:
            continue
        try:
            _link_control(twin, _config(sibling), run.pk)
        except (RunImportError, RunFolderError):
            continue


def _link_control(run: Run, cfg, target: str | int) -> None:
    text = str(target).strip()
    main = Run.objects.filter(pk=int(text)).first() if text.isdecimal() else None
    if main is None and not text.isdecimal():
        main = Run.objects.filter(imported_from=str(Path(text).expanduser().resolve())).first()
    if main is None:
        raise RunImportError(f"--control-of {text}: no such run (give a run id, or a run folder imported before)")
    if cfg.train.control == "none":
        raise RunImportError(f"{run.imported_from} is not a control run (its config.yaml has train.control: none); "
                             "import it without --control-of")
    if main.pk == run.pk or main.control_of_id:
        raise RunImportError(f"--control-of {text}: run {main.pk} is {'this run' if main.pk == run.pk else 'a control'}"
                             "; give the run this folder is the control of")
    if (main.method, main.model_name) != (cfg.method, cfg.model.name_or_path):
        raise RunImportError(f"--control-of {text}: run {main.pk} is {main.method} on {main.model_name}, this folder "
                             f"{cfg.method} on {cfg.model.name_or_path}; a control is the same config")
    Run.objects.filter(pk=run.pk).update(control_of=main)
    run.control_of = main


def _config(folder: Path):
    from trainer.config import ConfigError, load_config

    try:
        return load_config(folder / "config.yaml")
    except ConfigError as exc:
        raise RunFolderError(f"config.yaml is not a valid run config: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"config.yaml cannot be read ({exc})") from None


NOTES_MAX = 20000


def _notes(folder: Path) -> str:
    """The folder's notes.md (what the run was and what it showed), or ""."""
    path = folder / "notes.md"
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()[:NOTES_MAX] if path.is_file() else ""
    except OSError:
        return ""


def _import(folder: Path, cfg, user) -> ImportSummary:
    own = Run.objects.filter(run_dir=str(folder), imported_from="").first()
    if own is not None:
        raise RunImportError(f"{folder} is the folder of run {own.pk} of this site, which has its rows already "
                             f"(see /runs/{own.pk}/); copy the folder elsewhere to import it as another run")
    fields = {"method": cfg.method, "model_name": cfg.model.name_or_path[:500], "config": cfg.to_dict(),
              "overrides": {"imported_from": str(folder)}, "status": Status.FINISHED, "requested": "",
              "resumable": False, "total_steps": cfg.train.steps, "queue": IMPORTED_QUEUE, "worker_name": "",
              "run_dir": str(folder), "error": "", "started_at": None, "first_started_at": None, "finished_at": None,
              "heartbeat_at": None,  # unknown: a folder's file times are those of its last copy
              "corpus_name": Path(cfg.corpus.path).name[:200] if cfg.corpus.path else ""}
    run = Run.objects.select_for_update().filter(imported_from=str(folder)).first()
    created = run is None
    described = {"name": folder.name[:200], "notes": _notes(folder)}  # a researcher's later edits are kept
    if created:
        run = Run.objects.create(imported_from=str(folder),
                                 owner=user if getattr(user, "is_authenticated", False) else None,
                                 **fields, **described)
    else:
        Run.objects.filter(pk=run.pk).update(**fields, **{k: v for k, v in described.items()
                                                          if v and not getattr(run, k)})
    summary = ImportSummary(run=run, created=created)

    sink = DjangoSink(run, flush_seconds=math.inf, max_buffer=2000, live=False)
    ran_at = None  # the earliest wall_clock of metrics.jsonl: when the run ran (its "created" in lists)
    for step, role, values in read_metrics(folder):
        sink.metrics(step, role, values)
        summary.metrics += 1
        stamp = _wall_clock(values.get("wall_clock"))
        if stamp is not None and (ran_at is None or stamp < ran_at):
            ran_at = stamp
    for record in read_samples(folder):
        sink.samples(record.get("step", 0), [record])
        summary.samples += 1
    sink.close()

    checkpoints = read_checkpoints(folder)
    for step, ckpt_path in checkpoints.items():
        Checkpoint.objects.update_or_create(run=run, step=step, defaults={"path": ckpt_path[:1000]})
    summary.checkpoints = len(checkpoints)
    last = max(checkpoints) if checkpoints else None
    run.refresh_from_db()
    if last is not None:
        run.checkpoint_path = checkpoints[last][:1000]
    run.current_step = max(run.current_step, last or 0)
    run.heartbeat_at = None  # the sink stamped the import's own time: no worker of this site ever ran it
    update = ["checkpoint_path", "current_step", "heartbeat_at"]
    if ran_at is not None:  # else created_at stays the import's time
        run.created_at = datetime.fromtimestamp(ran_at, tz=dt_timezone.utc)
        update.append("created_at")
    run.save(update_fields=update)

    for hook in hooks.IMPORT:  # apps.evals: evals.jsonl, eval_samples/, crossplay.json
        counts = hook(run, folder) or {}
        summary.evals += int(counts.get("evals", 0))
        summary.eval_samples += int(counts.get("eval_samples", 0))
        summary.crossplay |= bool(counts.get("crossplay"))

    what = summary.what()
    message = f"imported from {folder}: {what}" if created else f"imported again from {folder} (updated in place): {what}"
    RunEvent.objects.create(run=run, kind=RunEvent.Kind.STATUS, step=run.current_step, message=message,
                            data={"to": Status.FINISHED, "imported_from": str(folder)})
    return summary


def _wall_clock(value) -> float | None:
    """A metrics line's ``wall_clock`` (seconds since the epoch) as a time a run can have run at, else None (absent,
    not a number, before 2000 or in the future)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if 946684800 <= value <= time.time() + 86400 else None
