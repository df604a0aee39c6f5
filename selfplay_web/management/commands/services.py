"""`manage.py services start|stop|status`: the embedded Postgres (pgvector) and Redis."""
from django.core.management.base import BaseCommand, CommandError

from selfplay_web import services


class Command(BaseCommand):
    help = "Start, stop or report the embedded Postgres+pgvector and Redis (no-ops where configured by URL)."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["start", "stop", "status"])

    def handle(self, action, **options):
        try:
            statuses = {"start": services.start_all, "stop": services.stop_all, "status": services.status_all}[action]()
        except services.ServiceError as exc:
            raise CommandError(str(exc)) from None
        for status in statuses:
            self.stdout.write(status.line())
        if action == "start" and not all(s.running for s in statuses):
            raise CommandError("a service did not start; see the lines above")
