"""manage.py reap_runs: fail running jobs whose worker stopped sending heartbeats: runs (resumably),
evaluations and cross-play matrices (apps/runs/jobkit.py: reap_all)."""
from django.conf import settings

from apps.accounts.schema import SchemaCommand
from apps.runs.jobkit import reap_all


class Command(SchemaCommand):
    help = (f"Fail running runs (resumably), evaluations and cross-play matrices without a heartbeat for "
            f"SELFPLAY_HEARTBEAT_SECONDS ({settings.RUN_HEARTBEAT_SECONDS}s).")

    def handle(self, *args, **options):
        reaped = reap_all()
        runs = reaped["runs"]
        self.stdout.write(f"reaped {len(runs)} run(s)" + (f": {', '.join(map(str, runs))}" if runs else ""))
        for kind, noun in (("evals", "evaluation"), ("crossplays", "cross-play matrix")):
            if reaped[kind]:
                self.stdout.write(f"reaped {len(reaped[kind])} {noun}(s): {', '.join(map(str, reaped[kind]))}")
