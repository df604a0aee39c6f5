"""ASGI entry point: HTTP through Django, websockets through Channels (session auth)."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "selfplay_web.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from asgiref.sync import sync_to_async  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.core.handlers.exception import response_for_exception  # noqa: E402

from selfplay_web.routing import websocket_urlpatterns  # noqa: E402


class StaticFiles(ASGIStaticFilesHandler):
    """/static/ from the app's own files. A path that tries to leave the static folders
    (``/static/../secret_key``) gets Django's 400 instead of an unhandled error (a 500); the
    files carry nosniff, X-Frame-Options and Referrer-Policy like every page (they skip the middleware)."""

    async def get_response_async(self, request):
        try:
            response = await super().get_response_async(request)
        except SuspiciousOperation as exc:
            return await sync_to_async(response_for_exception, thread_sensitive=False)(request, exc)
        from django.conf import settings

        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", settings.X_FRAME_OPTIONS)
        response.headers.setdefault("Referrer-Policy", settings.SECURE_REFERRER_POLICY)
        return response


application = ProtocolTypeRouter(
    {
        "http": StaticFiles(django_asgi),  # /static/ (css, htmx, plotly) from the app's own files
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
