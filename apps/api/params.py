"""One guard for every URL parameter of every page and API route: ``ParamGuardMiddleware``.

Views parse their own parameters (``int(...)``, a Paginator, a filter on a text column), and two kinds of value
used to get past them into Postgres as a 500: a NUL byte (``search?q=owl%00x``: "text fields cannot contain NUL")
and a number too large for a bigint (``review/queue?page=1e20`` or ``page=99999999999999999999``: "bigint out of
range" from an OFFSET or an id filter). Before any view runs, a request whose path or query string holds either
is answered 400 naming the parameter and what to send instead (JSON ``{"error": ...}`` under /api/, the site's
error page elsewhere). No parameter of this site means a number beyond ``LIMIT`` (2**53 - 1, the largest integer
a browser's JavaScript keeps exact): ids, steps, pages and sizes are all far below it.

API bodies (JSON and forms) go through ``NulSafeJSONParser`` / ``NulSafeFormParser`` (settings'
``DEFAULT_PARSER_CLASSES``): a NUL byte in any string or key is a 400 naming its key path.
"""
from __future__ import annotations

import math
import re

from django.http import JsonResponse
from django.shortcuts import render
from rest_framework import parsers
from rest_framework.exceptions import ParseError

LIMIT = 2**53 - 1
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def param_problem(name: str, value: str) -> str | None:
    """Why one query parameter is refused (None when the views may parse it)."""
    if "\x00" in name or "\x00" in value:
        return f"parameter {name.replace(chr(0), '%00')!r} contains a NUL byte (%00); remove it"
    text = value.strip()
    if NUMBER.fullmatch(text):
        try:
            number = float(text)
        except (OverflowError, ValueError):
            number = math.inf
        if not math.isfinite(number) or abs(number) > LIMIT:
            return f"parameter {name!r}: {text[:40]} is out of range; numbers here are at most {LIMIT}"
    return None


def request_problem(request) -> str | None:
    if "\x00" in request.path:
        return "the address contains a NUL byte (%00); remove it"
    for name, values in request.GET.lists():
        for value in values:
            why = param_problem(name, value)
            if why:
                return why
    return None


class ParamGuardMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        why = request_problem(request)
        if why:
            if request.path.startswith("/api/"):
                return JsonResponse({"error": why}, status=400)
            return render(request, "error.html", {"status": 400, "title": "Bad request", "message": why,
                                                  "path": request.path.replace("\x00", "%00")}, status=400)
        return self.get_response(request)


def nul_path(data, path: str = "") -> str | None:
    """The key path of the first string (or key) holding a NUL byte in parsed request data, else None."""
    if isinstance(data, str):
        return path or "body" if "\x00" in data else None
    if isinstance(data, dict) or hasattr(data, "lists"):
        items = data.lists() if hasattr(data, "lists") else data.items()
        for key, value in items:
            where = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return where.replace("\x00", "%00")
            found = nul_path(value, where)
            if found:
                return found
    if isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            found = nul_path(value, f"{path}[{i}]")
            if found:
                return found
    return None


def _refuse_nul(data):
    where = nul_path(data)
    if where:
        raise ParseError(f"{where} contains a NUL byte (\\u0000); remove it")
    return data


class NulSafeJSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing a NUL byte in any string or key of the body (Postgres text cannot hold one)."""

    def parse(self, stream, media_type=None, parser_context=None):
        return _refuse_nul(super().parse(stream, media_type, parser_context))


class NulSafeFormParser(parsers.FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        return _refuse_nul(super().parse(stream, media_type, parser_context))
