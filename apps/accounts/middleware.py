"""Every page needs a login. The API answers 401/403 itself (DRF), so it is not redirected."""
from django.conf import settings
from django.contrib.auth.views import redirect_to_login

OPEN_PREFIXES = ("/accounts/login/", "/static/", "/favicon.ico")


class LoginRequiredMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path
        if (
            not request.user.is_authenticated
            and not path.startswith(OPEN_PREFIXES)
            and not path.startswith("/api/")
        ):
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return self.get_response(request)
