"""manage.py import_run DIR [DIR ...] [--user NAME] [--json]

Loads standalone run folders (``python -m trainer run CONFIG --out DIR``, plus the evals.jsonl,
eval_samples/ and crossplay.json that evaluation scripts add: trainer/runfolder.py) into the web as finished, imported
runs with their metrics, samples, checkpoints and checkpoint evaluations (apps/runs/importer.py).
Importing a folder again updates its run in place (nothing is duplicated). Prints one line per
folder (``--json``: one JSON object); exits 1, naming the folder, the file and the line, when a folder
cannot be imported (the others still are).
"""
from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.runs.importer import RunImportError, import_folder


class Command(BaseCommand):
    help = "Import run folders written by `python -m trainer run` (metrics, samples, checkpoints, evaluations)."

    def add_arguments(self, parser):
        parser.add_argument("folders", nargs="+", metavar="DIR", help="A run folder (config.yaml, metrics.jsonl, ...).")
        parser.add_argument("--user", default=None, help="Owner of a newly imported run (a username).")
        parser.add_argument("--json", dest="as_json", action="store_true", help="Print one JSON object per folder.")
        parser.add_argument("--control-of", dest="control_of", default=None, metavar="RUN",
                            help="The folders are controls (train.control set) of this run: its id, or the folder it "
                                 "was imported from. Both run pages then show the gain over the base and the control.")

    def handle(self, *args, folders, user, as_json: bool = False, control_of=None, **options):
        owner = None
        if user:
            owner = get_user_model().objects.filter(username=user).first()
            if owner is None:
                raise CommandError(f"no user {user!r}; give an existing username or leave --user out")
        failed = []
        for folder in folders:
            try:
                summary = import_folder(folder, user=owner, control_of=control_of)
            except RunImportError as exc:
                if len(folders) == 1:
                    raise CommandError(str(exc)) from None
                failed.append(folder)
                self.stderr.write(f"error: {folder}: {exc}" if str(folder) not in str(exc) else f"error: {exc}")
                continue
            if as_json:
                self.stdout.write(json.dumps(summary.as_dict()))
                continue
            run = summary.run
            what = summary.what()
            if summary.created:
                self.stdout.write(f"run {run.pk} imported from {run.imported_from}: {run.method}, {run.model_name}, "
                                  f"{run.current_step} steps; {what} (/runs/{run.pk}/)")
            else:
                self.stdout.write(f"run {run.pk} already imported from {run.imported_from}; updated in place, nothing "
                                  f"duplicated: {what} (/runs/{run.pk}/)")
        if failed:
            raise CommandError(f"{len(failed)} of {len(folders)} folder(s) not imported: {', '.join(failed)}")
