"""manage.py reap_runs: fail running jobs whose worker stopped sending heartbeats: runs (resumably),
evaluations and cross-play matrices, every job kind of the shared reaper (apps/jobs/reaper.py)."""
from django.conf import settings

from apps.accounts.schema import SchemaCommand
from apps.jobs.reaper import KINDS, reap_all


class Command(SchemaCommand):
    help = (f"Fail running runs (resumably), evaluations and cross-play matrices without a heartbeat for "
            f"SELFPLAY_HEARTBEAT_SECONDS ({settings.RUN_HEARTBEAT_SECONDS}s).")

    def handle(self, *args, **options):
        reaped = reap_all()
        runs = reaped.pop("runs", [])
        self.stdout.write(f"reaped {len(runs)} run(s)" + (f": {', '.join(map(str, runs))}" if runs else ""))
        for name, pks in reaped.items():
            if pks:
                self.stdout.write(f"reaped {len(pks)} {KINDS[name].noun}: {', '.join(map(str, pks))}")
