"""Where the workers' own API keys may be sent: the operator's endpoint allow-list.

A run names its judge / meta-harness endpoint, so a key read from the worker's environment
(``$SELFPLAY_JUDGE_API_KEY``, any ``env:NAME``) would go wherever the run says. The operator
lists the endpoints that may receive such keys in ``$SELFPLAY_JUDGE_ENDPOINTS``, comma-separated
entries of two forms:

- ``https://api.example.org/v1``: that scheme, host and port (the scheme's default when none is
  written), and URLs whose path starts with ``/v1`` in whole segments (``/v10`` does not match);
- ``judge.internal`` or ``judge.internal:8000``: that host over http or https, on any port or on
  the one written.

Hosts compare exactly, as written (no DNS, no subdomains); a URL with ``.``/``..`` path segments,
credentials, or another scheme never matches.

A run's own key (typed into the web form or API, sealed, then opened by its worker into a
``SELFPLAY_RUN<id>_...`` variable: ``RUN_KEY``) belongs to the researcher and may go to any
endpoint. With ``$SELFPLAY_JUDGE_ENDPOINTS`` unset (the standalone trainer: whoever writes the
config owns the keys) nothing is restricted; the web's workers always set it, and set but empty
means no endpoint may receive a worker key.

``EndpointClient`` (trainer.judge) refuses to attach a key that may not go to its URL
(``KeyNotAllowed``) and never follows redirects (urllib would resend the key to the new host).
"""
from __future__ import annotations

import os
import re
import urllib.request
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

ENV = "SELFPLAY_JUDGE_ENDPOINTS"
RUN_KEY = re.compile(r"SELFPLAY_RUN\d+_")
DEFAULT_PORTS = {"http": 80, "https": 443}


class KeyNotAllowed(PermissionError):
    """A worker's own API key would go to an endpoint outside ``$SELFPLAY_JUDGE_ENDPOINTS``."""


@dataclass(frozen=True)
class Entry:
    """One allowed endpoint: ``scheme`` None = http or https; ``port`` None = any (host entries)
    or the scheme's default (URL entries); ``path`` "" = any path."""

    host: str
    scheme: str | None = None
    port: int | None = None
    path: str = ""


def parse_entry(text: str) -> Entry:
    """``https://host[:port][/path]`` or ``host[:port]``; ValueError saying what is wrong."""
    text = text.strip()
    how = "write https://host/path (a URL prefix) or host[:port]"
    parts = urlsplit(text if "://" in text else "//" + text)
    if "://" in text and parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"{ENV} entry {text!r}: only http and https endpoints; {how}")
    if parts.username or parts.password or parts.query or parts.fragment or not parts.hostname:
        raise ValueError(f"{ENV} entry {text!r} is not an endpoint; {how}")
    if "://" not in text and parts.path:
        raise ValueError(f"{ENV} entry {text!r}: a path needs the scheme too; {how}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{ENV} entry {text!r} has a bad port; {how}") from None
    if "://" not in text:
        return Entry(host=parts.hostname.lower(), port=port)
    return Entry(host=parts.hostname.lower(), scheme=parts.scheme, port=port or DEFAULT_PORTS[parts.scheme],
                 path=parts.path.rstrip("/"))


def parse_allow_list(text: str | None) -> list[Entry]:
    """The entries of a comma-separated ``$SELFPLAY_JUDGE_ENDPOINTS`` (blank ones skipped)."""
    return [parse_entry(item) for item in (text or "").split(",") if item.strip()]


def endpoint_allowed(url: str, entries: list[Entry]) -> bool:
    """Whether ``url`` (the URL actually requested) is covered by one of ``entries``."""
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or parts.username or parts.password or not parts.hostname:
        return False
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return False
    segments = unquote(parts.path).split("/")
    if "." in segments or ".." in segments:  # a server may resolve them out of the allowed prefix
        return False
    host, path = parts.hostname.lower(), parts.path
    for entry in entries:
        if entry.host != host or (entry.scheme and entry.scheme != parts.scheme):
            continue
        if entry.port is not None and entry.port != port:
            continue
        if entry.path and not (path == entry.path or path.startswith(entry.path + "/")):
            continue
        return True
    return False


def completions_url(base_url: str) -> str:
    """The URL an OpenAI-compatible client posts to: ``{base_url}/chat/completions``."""
    base = base_url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


def run_own_key(env_name: str) -> bool:
    """A variable the web's worker opened from the run's own sealed key (the researcher's)."""
    return bool(RUN_KEY.match(env_name))


def key_may_go(env_name: str, url: str, environ=None) -> bool:
    """Whether the key held in ``env_name`` may be sent to ``url`` (module docstring)."""
    environ = os.environ if environ is None else environ
    if run_own_key(env_name) or environ.get(ENV) is None:
        return True
    return endpoint_allowed(url, parse_allow_list(environ.get(ENV)))


def refusal(env_name: str, url: str) -> str:
    """Why the key in ``env_name`` is not sent to ``url``, and the two ways to fix it."""
    host = urlsplit(url).hostname or url
    return (f"the worker's API key ${env_name} is sent only to endpoints listed in ${ENV}, and {host} "
            f"(this run's endpoint) is not one of them: give the run its own key for this endpoint (typed into "
            f"the web form or the API, stored encrypted), or add the endpoint to ${ENV} on the workers and the "
            "web server (comma-separated URL prefixes or hosts, e.g. https://api.example.org/v1)")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect becomes an HTTPError: urllib would resend the Authorization header to the new URL."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def open_url(request: urllib.request.Request, timeout: float):
    """``urlopen`` without following redirects."""
    return _OPENER.open(request, timeout=timeout)
