"""The Content-Security-Policy header of every response (docs/SECURITY.md).

Scripts run only from this site's own files (htmx, plotly and the pages' scripts are vendored under
static/, no CDN) or from an inline ``<script nonce="{{ request.csp_nonce }}">`` carrying this
request's nonce; no page needs one today (their scripts are static files, their data is in
``json_script`` blocks, which are JSON and never run). So an injected ``<script>`` or ``onclick=``
does not run even where escaping failed.

- ``style-src 'unsafe-inline'``: plotly.js sets its styles from JavaScript (and adds a ``<style>``
  element), htmx adds one for its indicators, and the templates use ``style=`` attributes; styles
  cannot run code.
- ``img-src data: blob:``: plotly's "download as PNG" and its icons; ``worker-src blob:``: Redoc
  (/api-docs/redoc/) parses the schema in a worker.
- ``connect-src 'self'``: fetches and the live page's websocket (ws:/wss: to this host).
- ``frame-ancestors 'none'`` (with X-Frame-Options DENY), ``form-action 'self'``, ``base-uri 'self'``,
  ``object-src 'none'``.

A response that sets its own policy keeps it.
"""
from __future__ import annotations

import secrets

POLICY = ("default-src 'self'; script-src 'self' 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
          "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")


def policy(nonce: str) -> str:
    return POLICY.format(nonce=nonce)


class ContentSecurityPolicyMiddleware:
    """Gives each request a fresh nonce (``request.csp_nonce``) and each response the policy."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.csp_nonce = secrets.token_urlsafe(18)
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy(request.csp_nonce)
        return response
