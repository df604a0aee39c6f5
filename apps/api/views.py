from django.shortcuts import redirect
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


class SchemaView(SpectacularAPIView):
    """/api/v1/schema/: the OpenAPI document (JSON, or YAML with ?format=yaml); a browser that asks for
    a page (Accept: text/html, no ?format) is sent to the Swagger UI page that reads it."""

    @extend_schema(exclude=True)  # the schema's own address is not an API operation
    def get(self, request, *args, **kwargs):
        if "text/html" in request.headers.get("Accept", "") and "format" not in request.GET:
            return redirect("api-docs")
        return super().get(request, *args, **kwargs)
