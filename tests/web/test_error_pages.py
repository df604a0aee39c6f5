"""403, 404 and 500 are the site's own pages with its navigation and what to do; the API answers
JSON; DEBUG is off unless asked for, so no page lists the URL patterns (issue 20)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import RequestFactory

from apps.accounts.errors import server_error


def test_a_reviewer_on_the_launch_form_gets_the_role_message_inside_the_site(client, reviewer):
    client.force_login(reviewer)
    page = client.get("/runs/new/")
    assert page.status_code == 403
    text = page.content.decode()
    assert "This needs the researcher role; ask an admin to add you to it." in text
    assert 'class="mainnav"' in text and 'href="/runs/"' in text  # the navigation is there


def test_an_unknown_run_is_a_plain_404_without_url_patterns(client, reader):
    client.force_login(reader)
    page = client.get("/runs/9999/")
    assert page.status_code == 404
    text = page.content.decode()
    assert "Page not found" in text and 'class="mainnav"' in text
    assert "URLconf" not in text and "runs/<int:run_id>/" not in text


@pytest.mark.django_db
def test_an_unknown_api_path_answers_json(client, reader):
    client.force_login(reader)
    response = client.get("/api/v1/nothing-here/")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": "Page not found: /api/v1/nothing-here/"}


def test_the_500_page_keeps_the_layout(reader):
    request = RequestFactory().get("/runs/1/")
    request.user = reader
    response = server_error(request)
    assert response.status_code == 500
    text = response.content.decode()
    assert "Something broke on our side" in text and 'class="mainnav"' in text


def test_debug_is_off_unless_asked_for():
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    code = ("import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'selfplay_web.settings'; "
            "from django.conf import settings; print(settings.DEBUG, settings.SESSION_COOKIE_SECURE, "
            "settings.SECURE_SSL_REDIRECT)")
    out = subprocess.run([sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False", "False"]  # and localhost stays plain HTTP
