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

Where a run may call at all (``destination_problem``), keys or none: only http and https, and an
endpoint that is not listed must be a public address. A host that is (or resolves to) a loopback,
private, link-local, shared, reserved or multicast address is refused unless the operator lists it in
``$SELFPLAY_JUDGE_ENDPOINTS``: the web's runs would otherwise reach the servers' own network (the
database, Redis, a cloud metadata service). The web checks at launch; its workers (the variable set)
check again before each request, and connect only to the address they checked (``open_url``: a name
that resolves to another address by then, DNS rebinding, is refused at the socket). Refusals never
depend on whether anything listens there, and a worker reports any failure to connect to an unlisted
endpoint with one message (``UNREACHABLE``), so a run's errors cannot map the ports of a host.
"""
from __future__ import annotations

import http.client
import ipaddress
import os
import re
import socket
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


class DestinationNotAllowed(PermissionError):
    """A run's endpoint is not http(s), or is an internal address the operator did not list."""


UNREACHABLE = "no answer (the connection failed or timed out)"


def public_address(address: str) -> bool:
    """Whether an IP address is on the public internet (not loopback, private, link-local, CGNAT, reserved ...)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _resolve(host: str, port: int) -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})
    except (OSError, UnicodeError):
        return []


def destination_problem(url: str, entries: list[Entry], resolve=None) -> str | None:
    """Why a run may not call ``url`` (None when it may): not http(s); or not listed in ``entries`` and its host is
    not a public address (a name is resolved: every address it has must be public)."""
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return f"{url!r} is not an http(s) URL; give one such as https://api.example.org/v1"
    if endpoint_allowed(url, entries):
        return None
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return f"{url!r} has a bad port"
    host = parts.hostname
    addresses = [host] if _is_ip(host) else (resolve or _resolve)(host, port)
    listed = (f"the runs of this server call only public endpoints and those the operator lists in {ENV} "
              f"(ask the operator to add it, e.g. {parts.netloc})")
    if not addresses:
        return f"the host {host} cannot be resolved from this server; {listed}"
    if not all(public_address(a) for a in addresses):
        return f"{host} is an internal address (loopback, private, link-local or reserved), or resolves to one; {listed}"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        return False


def check_destination(url: str, environ=None) -> None:
    """A web worker's check before each request (``$SELFPLAY_JUDGE_ENDPOINTS`` set); the standalone
    trainer (unset) may call anything."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV) is None:
        return
    why = destination_problem(url, parse_allow_list(environ.get(ENV)))
    if why:
        raise DestinationNotAllowed(why)


def guarded(environ=None) -> bool:
    """Whether this process is a web worker (its requests go through the destination rule)."""
    return (os.environ if environ is None else environ).get(ENV) is not None


def _public_connection(address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):
    """``socket.create_connection`` that connects only to public addresses of the host (checked per address)."""
    host, port = address
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if not public_address(sockaddr[0]):
            raise DestinationNotAllowed(f"{host} resolves to an internal address; the runs of this server call only "
                                        f"public endpoints and those the operator lists in {ENV}")
        sock = socket.socket(family, kind, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"cannot connect to {host}")


class _PublicHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._create_connection = _public_connection


class _PublicHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._create_connection = _public_connection


class _PublicHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_PublicHTTPConnection, req)


class _PublicHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_PublicHTTPSConnection, req, context=self._context)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect becomes an HTTPError: urllib would resend the Authorization header to the new URL."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)
# an unlisted endpoint of a web worker: straight to the address checked at the socket (no proxy in between)
_PUBLIC_OPENER = urllib.request.build_opener(_NoRedirects, urllib.request.ProxyHandler({}), _PublicHTTPHandler,
                                             _PublicHTTPSHandler)


def open_url(request: urllib.request.Request, timeout: float, environ=None):
    """``urlopen`` without following redirects. On a web worker (``$SELFPLAY_JUDGE_ENDPOINTS`` set) the URL
    must pass ``destination_problem`` (DestinationNotAllowed), and an unlisted endpoint is connected to only
    at a public address, the one checked."""
    environ = os.environ if environ is None else environ
    if not guarded(environ):
        return _OPENER.open(request, timeout=timeout)
    entries = parse_allow_list(environ.get(ENV))
    why = destination_problem(request.full_url, entries)
    if why:
        raise DestinationNotAllowed(why)
    opener = _OPENER if endpoint_allowed(request.full_url, entries) else _PUBLIC_OPENER
    return opener.open(request, timeout=timeout)
