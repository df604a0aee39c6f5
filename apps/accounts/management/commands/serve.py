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

        # a websocket handshake may wait longer than daphne's 5 s default while many pages connect at once
        # on a busy machine (benchmarks/load.py: most of 200 viewers were dropped with 5 s)
        sys.argv = ["daphne", "-b", host, "-p", str(port), "--proxy-headers", "--websocket_connect_timeout", "30",
                    "selfplay_web.asgi:application"]
        CommandLineInterface.entrypoint()
