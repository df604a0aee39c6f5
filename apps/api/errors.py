"""Every API error is JSON `{"error": "..."}` with a 4xx status and a message that says how to fix it."""
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler


def _flatten(detail, prefix="") -> list[str]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = key if key != "non_field_errors" else ""
            out += _flatten(value, f"{prefix}{name}: " if name else prefix)
        return out
    if isinstance(detail, list):
        out = []
        for item in detail:
            out += _flatten(item, prefix)
        return out
    return [f"{prefix}{detail}"]


# The OpenAPI schema of every error answer (``responses={**ERRORS, 200: ...}`` in extend_schema).
ERROR = inline_serializer("Error", {
    "error": serializers.CharField(help_text="What is wrong and how to fix it."),
    "fields": serializers.DictField(child=serializers.CharField(), required=False,
                                    help_text="Per field, what is wrong with it (bad launches and forms)."),
})
ERRORS = {code: ERROR for code in (400, 401, 403, 404, 409, 413, 503)}


def error_response(message: str, code: int = status.HTTP_400_BAD_REQUEST, **extra) -> Response:
    return Response({"error": message, **extra}, status=code)


def _suspicious(exc: SuspiciousOperation) -> Response:
    """Django refuses oversized or overfull request bodies while DRF parses them: JSON, not an HTML 400."""
    if isinstance(exc, RequestDataTooBig):
        return error_response(f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2**20} MiB: upload "
                              "big documents as a multipart `file`.", status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, TooManyFilesSent):
        return error_response(f"Too many files in one request (limit {settings.DATA_UPLOAD_MAX_NUMBER_FILES}); "
                              "send them in several requests or as one .zip.")
    if isinstance(exc, TooManyFieldsSent):
        return error_response(f"Too many form fields in one request (limit {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS}).")
    return error_response(f"Bad request: {exc}")


def exception_handler(exc, context):
    if isinstance(exc, SuspiciousOperation):
        return _suspicious(exc)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, Http404):
        return error_response("Not found: check the id in the URL.", status.HTTP_404_NOT_FOUND)
    response = drf_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.NotAuthenticated):
        message = "Authentication required: send `Authorization: Token <key>` (get yours at /accounts/token/) or log in."
    elif isinstance(exc, exceptions.AuthenticationFailed):
        message = f"{exc.detail} Get a valid token at /accounts/token/."
    else:
        message = "; ".join(_flatten(exc.detail)) if hasattr(exc, "detail") else str(exc)
    body = {"error": message}
    if isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, dict):
        body["fields"] = exc.detail
    response.data = body
    return response
