"""manage.py reap_runs: mark running runs whose worker stopped sending heartbeats as failed (resumable)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from apps.runs.services.lifecycle import reap_stale_runs


class Command(BaseCommand):
    help = f"Fail (resumably) running runs without a heartbeat for SELFPLAY_HEARTBEAT_SECONDS ({settings.RUN_HEARTBEAT_SECONDS}s)."

    def handle(self, *args, **options):
        reaped = reap_stale_runs()
        self.stdout.write(f"reaped {len(reaped)} run(s)" + (f": {', '.join(map(str, reaped))}" if reaped else ""))
