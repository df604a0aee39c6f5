from django.shortcuts import redirect
from django.urls import reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from drf_spectacular.views import SpectacularAPIView
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from apps.accounts.roles import ROLE_OF_PERM, can
from apps.api.errors import ERRORS

ME = inline_serializer("Me", {
    "username": serializers.CharField(),
    "roles": serializers.ListField(child=serializers.CharField(), help_text="groups (and superuser)"),
    "permissions": serializers.ListField(child=serializers.CharField(), help_text="what this account may do")})


@extend_schema(operation_id="me", responses={200: ME, **ERRORS})
@api_view(["GET"])
def me(request):
    """Who the token belongs to and what they may do."""
    user = request.user
    return Response({
        "username": user.get_username(),
        "roles": sorted(g.name for g in user.groups.all()) + (["superuser"] if user.is_superuser else []),
        "permissions": sorted(p for p in ROLE_OF_PERM if can(user, p)),
    })


def wants_page(request) -> bool:
    """A browser asking for a page (Accept: text/html, no ?format): it is sent to the API's documentation page."""
    return "text/html" in request.headers.get("Accept", "") and "format" not in request.GET


ROOT_LINKS = {  # route name -> what it lists (the collections; items are linked from them)
    "api-me": "who this token is and what it may do",
    "api-runs": "runs (POST launches one)",
    "api-models": "models a run may use",
    "api-corpora": "corpora (POST creates one)",
    "api-evals": "evaluations (POST starts one)",
    "api-eval-benchmarks": "benchmarks",
    "api-eval-compare": "base vs checkpoints vs runs",
    "api-review-queue": "the human review queue",
    "schema": "the OpenAPI document (every endpoint, parameter and example)",
}


@extend_schema(operation_id="api_root", responses={200: inline_serializer("ApiRoot", {
    "docs": serializers.CharField(), "endpoints": serializers.DictField(child=serializers.DictField())}), **ERRORS})
@api_view(["GET"])
def root(request):
    """/api/v1/: where to start; a browser asking for a page is sent to the API's documentation page."""
    if wants_page(request):
        return redirect("api-docs")
    return Response({"docs": reverse("api-docs"),
                     "endpoints": {reverse(name): {"what": what} for name, what in ROOT_LINKS.items()}})


class SchemaView(SpectacularAPIView):
    """/api/v1/schema/: the OpenAPI document (JSON, or YAML with ?format=yaml); a browser that asks for
    a page (Accept: text/html, no ?format) is sent to the Swagger UI page that reads it."""

    @extend_schema(exclude=True)  # the schema's own address is not an API operation
    def get(self, request, *args, **kwargs):
        if wants_page(request):
            return redirect("api-docs")
        return super().get(request, *args, **kwargs)
