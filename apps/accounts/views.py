from django.contrib.auth import views as auth_views
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

from apps.accounts.dashboard import dashboard_context
from apps.accounts.throttle import ThrottledAuthenticationForm


def home(request):
    """The dashboard: what is running, what needs review, where to start."""
    return render(request, "home.html", dashboard_context(request))


@require_http_methods(["GET", "POST"])
@never_cache  # the page shows the token: no browser or proxy cache keeps it
def token(request):
    """Show (or rotate, on POST) the user's API token."""
    if request.method == "POST":
        Token.objects.filter(user=request.user).delete()
    tok, _ = Token.objects.get_or_create(user=request.user)
    return render(request, "accounts/token.html", {"token": tok.key})


class LoginView(auth_views.LoginView):
    """Django's login page with the failed-login throttle (apps/accounts/throttle.py): a locked
    username + address gets the form back with how long to wait, as 429 Too Many Requests."""

    template_name = "accounts/login.html"
    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.throttled:
            response.status_code = 429
        return response
