#!/usr/bin/env python
"""Selfplay's command line: `python manage.py services start`, `serve`, `launch`, ..."""
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"Configuration error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
