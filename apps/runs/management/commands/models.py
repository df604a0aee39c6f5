"""`manage.py models [--json] [--import NAME]`: the models a run can use, with their sizes.

Lists the bundled models (installed or not, with the command that installs a missing one) and
the model folders of the models directory. ``--import NAME`` imports a bundled model now (once;
a run would otherwise do it on first use), checking its parts' sizes and sha256.
"""
from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from trainer.models import BUNDLED, ModelNotFound, catalog, import_bundled


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class Command(BaseCommand):
    help = "List the models a run can use (bundled and in the models directory), with their sizes."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help='print {"models": [...]} like the API')
        parser.add_argument("--import", dest="import_name", metavar="NAME",
                            help=f"import a bundled model now ({', '.join(BUNDLED)})")

    def handle(self, *args, json: bool = False, import_name: str | None = None, **options):
        if import_name:
            if import_name not in BUNDLED:
                raise CommandError(f"{import_name!r} is not a bundled model; choose one of {', '.join(BUNDLED)}")
            try:
                path = import_bundled(import_name, settings.MODELS_DIR / import_name)
            except ModelNotFound as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"{import_name}: imported at {path}")
        rows = catalog(settings.MODELS_DIR)
        if json:
            self.stdout.write(_dumps({"models": rows}))
            return
        self.stdout.write(f"{'name':32} {'params':>7} {'installed':>9} {'package':>9} {'imported':>9}  use")
        for r in rows:
            imported = human_bytes(r["disk_bytes"]) if r["imported"] else "no"
            self.stdout.write(f"{r['name']:32} {r['params'] or '?':>7} {'yes' if r['installed'] else 'NO':>9} "
                              f"{human_bytes(r['package_bytes']):>9} {imported:>9}  {r['purpose'] or r['source']}")
        for r in rows:
            if not r["installed"]:
                self.stdout.write(f"\n{r['name']} is not installed: {r['problem']}")


_dumps = json.dumps
