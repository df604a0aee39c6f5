"""The users page (issue 32 item 5): an admin adds a user with roles (a typed or generated password) and changes
roles; others get 403; an admin cannot lock themselves out; bad input says what is wrong."""
import re

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


def _roles(name):
    return sorted(g.name for g in User.objects.get(username=name).groups.all())


def test_an_admin_creates_a_user_who_can_log_in_with_the_generated_password(client, admin_user):
    client.force_login(admin_user)
    page = client.post("/accounts/users/", {"action": "create", "username": "nora", "email": "nora@example.org",
                                            "roles": ["researcher", "reviewer"]}, follow=True).content.decode()
    assert _roles("nora") == ["researcher", "reviewer"]
    password = re.search(r"Their password, shown once: ([A-Za-z0-9_-]+)", page).group(1)
    assert client.login(username="nora", password=password)
    assert client.get("/accounts/users/").status_code == 403  # nora is no admin


def test_an_admin_changes_roles_but_not_their_own_admin_role(client, admin_user, researcher):
    client.force_login(admin_user)
    html = client.get("/accounts/users/").content.decode()
    assert 'href="/accounts/users/"' in html and 'data-user="rita"' in html
    client.post("/accounts/users/", {"action": "roles", "user": researcher.pk, "roles": ["reviewer"]})
    assert _roles("rita") == ["reviewer"]
    page = client.post("/accounts/users/", {"action": "roles", "user": admin_user.pk, "roles": ["researcher"]},
                       follow=True).content.decode()
    assert "you cannot take the admin role from yourself" in page and _roles("alice") == ["admin"]


@pytest.mark.parametrize("form, message", [
    ({"username": "rita", "password": "a-long-enough-password-1"}, "a user named &#x27;rita&#x27; exists already"),
    ({"username": "bad name!", "password": "a-long-enough-password-1"}, "the username must be letters, digits"),
    ({"username": "ok", "roles": ["god"]}, "unknown role &#x27;god&#x27;"),
])
def test_bad_input_says_what_is_wrong(client, admin_user, researcher, form, message):
    client.force_login(admin_user)
    page = client.post("/accounts/users/", {"action": "create", **form}, follow=True).content.decode()
    assert f"Not saved: {message}" in page
    assert User.objects.count() == 2


def test_only_admins_see_the_page(client, researcher):
    client.force_login(researcher)
    assert client.get("/accounts/users/").status_code == 403
    assert client.post("/accounts/users/", {"action": "create", "username": "x"}).status_code == 403
    assert not User.objects.filter(username="x").exists()
