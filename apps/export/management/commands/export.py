"""manage.py export RUN_ID --kind tasks|rubrics|attempts|grades|pairs|verdicts|config [--format jsonl|parquet]
-o FILE [--role R] [--step-min N] [--step-max N] [--iteration-min N] [--iteration-max N]
[--review approved|flagged|pending|none] [--valid true|false] [--after ID] [--limit N]

The same stream as GET /api/v1/runs/<id>/export/<kind>.<format> (apps/export/stream.py), written to a file.
"""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from apps.accounts.schema import SchemaCommand
from apps.export.stream import FORMATS, KINDS, ExportError, empty_reason, write_file
from apps.runs.models import Run

FILTER_OPTIONS = ("role", "step_min", "step_max", "iteration_min", "iteration_max", "review", "valid", "after", "limit")


class Command(SchemaCommand):
    help = "Export a run's tasks, rubrics, attempts, grades, preference pairs, verdicts or config as JSONL / Parquet."

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int, help="The run's id.")
        parser.add_argument("--kind", required=True, choices=KINDS, help="What to export.")
        parser.add_argument("--format", default=None, choices=FORMATS,
                            help="File format (default: parquet for a .parquet file name, else jsonl).")
        parser.add_argument("-o", "--output", required=True, help="File to write.")
        for name in FILTER_OPTIONS:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None,
                                help=f"Filter {name} (see GET /api/v1/schema/ for the meaning).")

    def handle(self, *args, run_id, kind, format, output, **options):
        run = Run.objects.select_related("corpus").filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run {run_id}; list them with the API (GET /api/v1/runs/) or at /runs/")
        params = {k: str(options[k]) for k in FILTER_OPTIONS if options.get(k) is not None}
        fmt = output_format(output, format)
        try:
            written, plan = write_file(run, kind, fmt, output, params)
        except ExportError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:  # a read-only folder, a full disk: one line, not a traceback
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
        more = " (more rows after it: --after %s)" % plan.last_id if plan.has_more else ""
        if plan.last_id is None and kind != "config":
            self.stderr.write(f"wrote {written} bytes to {output}: no rows. {empty_reason(kind, run, plan.filters)}")
            return
        self.stderr.write(f"wrote {written} bytes to {output}; last {plan.cursor_field} {plan.last_id}{more}")


def output_format(output: str, fmt: str | None) -> str:
    """The file's format: ``--format`` if given, else from the name (.parquet -> parquet, else jsonl); refuses a
    folder, a missing folder and a format the file name contradicts, each in one line."""
    path = Path(output)
    if path.is_dir():
        raise CommandError(f"-o {output} is a folder: give a file name, e.g. -o {path / 'export.jsonl'}")
    if not path.parent.is_dir():
        raise CommandError(f"-o {output}: the folder {path.parent} does not exist (create it, or write elsewhere)")
    named = "parquet" if path.suffix.lower() == ".parquet" else "jsonl" if path.suffix.lower() in (".jsonl", ".json") \
        else None
    if fmt is None:
        return named or "jsonl"
    if named is not None and named != fmt:
        raise CommandError(f"-o {output} names a {named} file but --format is {fmt}: drop --format (the file name "
                           f"decides) or name the file .{'parquet' if fmt == 'parquet' else 'jsonl'}")
    return fmt
