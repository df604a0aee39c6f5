"""`manage.py serve [--port 8000]`: the ASGI server (pages, API and websockets) via daphne."""
import sys

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve pages, the API and websockets (daphne, ASGI)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, port, host, **options):
        from daphne.cli import CommandLineInterface

        sys.argv = ["daphne", "-b", host, "-p", str(port), "--proxy-headers", "selfplay_web.asgi:application"]
        CommandLineInterface.entrypoint()
