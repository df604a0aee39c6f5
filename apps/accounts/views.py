from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token


def home(request):
    """The dashboard: what is running, what needs review, where to start."""
    from apps.accounts.dashboard import dashboard_context

    return render(request, "home.html", dashboard_context(request))


@require_http_methods(["GET", "POST"])
@never_cache  # the page shows the token: no browser or proxy cache keeps it
def token(request):
    """Show (or rotate, on POST) the user's API token."""
    if request.method == "POST":
        Token.objects.filter(user=request.user).delete()
    tok, _ = Token.objects.get_or_create(user=request.user)
    return render(request, "accounts/token.html", {"token": tok.key})
