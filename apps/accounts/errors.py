"""The error pages: 403, 404 and 500 inside the site's own layout, with its navigation and a line
that says what to do (issue 20). API paths get JSON ({"error": ...}) as the API's own errors do (apps/api/errors.py).

Django uses these only with DEBUG off (the default: selfplay_web/settings.py); with DEBUG on it
shows its technical pages instead, which list every URL pattern and must never face a visitor.
"""
from __future__ import annotations

import logging

from django.http import HttpResponse, JsonResponse
from django.shortcuts import render

log = logging.getLogger("selfplay.errors")

PAGES = {
    403: ("Not allowed", "You can't open this page with your account."),
    404: ("Page not found", "Nothing lives at this address: it may have been deleted, or the link is mistyped."),
    500: ("Something broke on our side", "The error is logged for the operator. Try again in a moment, or go back."),
}


def _reply(request, status: int, message: str = ""):
    title, default = PAGES[status]
    if request.path.startswith("/api/"):
        return JsonResponse({"error": message or f"{title}: {request.path}"}, status=status)
    context = {"status": status, "title": title, "message": message or default, "path": request.path}
    return render(request, "error.html", context, status=status)


def permission_denied(request, exception=None):
    """403 with the reason the check gave ("This needs the researcher role; ask an admin ...")."""
    message = str(exception or "").strip()
    return _reply(request, 403, message)


def page_not_found(request, exception=None):
    # Django's own Http404 messages name URL patterns or model names; a person needs none of that.
    return _reply(request, 404)


def server_error(request):
    try:
        return _reply(request, 500)
    except Exception:  # the layout itself failed (the database went away): a bare page, never a second traceback
        log.exception("the 500 page could not be rendered")
        title, default = PAGES[500]
        return HttpResponse(f"<!doctype html><title>{title}</title><h1>{title}</h1><p>{default}</p>"
                            '<p><a href="/">Selfplay home</a></p>', status=500)
