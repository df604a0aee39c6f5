from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response

from apps.accounts.roles import ROLE_OF_PERM, can


@extend_schema(operation_id="me", responses={200: OpenApiTypes.OBJECT})
@api_view(["GET"])
def me(request):
    """Who the token belongs to and what they may do."""
    user = request.user
    return Response({
        "username": user.get_username(),
        "roles": sorted(g.name for g in user.groups.all()) + (["superuser"] if user.is_superuser else []),
        "permissions": sorted(p for p in ROLE_OF_PERM if can(user, p)),
    })
