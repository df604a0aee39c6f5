"""Failed logins are throttled per username and client address (apps/accounts/throttle.py):
5 wrong passwords within 15 minutes lock the pair, the login page says how long to wait, the
lock ends when the window has passed, and nobody else is affected.

Time passes by moving the stored failures back (the rows the throttle counts), not by mocking a clock.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import authenticate
from django.db.models import F
from django.test import Client, RequestFactory, override_settings

from apps.accounts.models import LoginFailure
from apps.accounts.throttle import client_address

pytestmark = pytest.mark.django_db

RIGHT = "pw-rita"  # tests/web/conftest.py: the researcher's password


def _login(client, username, password, path="/accounts/login/", **extra):
    return client.post(path, {"username": username, "password": password}, **extra)


def _logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def _fail(client, username, times, **extra):
    for _ in range(times):
        response = _login(client, username, "wrong-password", **extra)
        assert response.status_code == 200 and b"didn't match" in response.content
    assert not _logged_in(client)


def _pass_time(minutes):
    LoginFailure.objects.update(at=F("at") - timedelta(minutes=minutes))


def test_five_wrong_passwords_then_the_right_one_is_refused_with_how_long_to_wait(researcher):
    client = Client()
    _fail(client, "rita", 5)
    response = _login(client, "rita", RIGHT)
    assert response.status_code == 429 and not _logged_in(client)
    text = response.content.decode()
    assert "Too many failed logins" in text and "wait 15 minutes" in text and "didn't match" not in text
    _pass_time(10)
    assert "wait 5 minutes" in _login(client, "rita", RIGHT).content.decode()
    assert LoginFailure.objects.count() == 5  # attempts while locked do not extend the lock


def test_after_the_window_the_right_password_works_and_the_count_starts_over(researcher):
    client = Client()
    _fail(client, "rita", 5)
    _pass_time(15)
    response = _login(client, "rita", RIGHT)
    assert response.status_code == 302 and _logged_in(client)
    assert not LoginFailure.objects.filter(username="rita").exists()  # cleared by the successful login


def test_four_failures_do_not_lock_and_a_success_clears_them(researcher):
    client = Client()
    _fail(client, "rita", 4)
    assert _login(client, "rita", RIGHT).status_code == 302
    other = Client()
    _fail(other, "rita", 4)  # 4 more after the success: still not locked
    assert _login(other, "rita", RIGHT).status_code == 302


def test_other_users_and_other_addresses_are_unaffected(researcher, reviewer):
    attacker = Client()
    _fail(attacker, "rita", 5)
    assert _login(attacker, "rita", RIGHT).status_code == 429
    assert _login(Client(), "vic", "pw-vic").status_code == 302  # another user, same address
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")
    assert _login(elsewhere, "rita", RIGHT).status_code == 302 and _logged_in(elsewhere)  # same user, elsewhere


def test_unknown_usernames_and_case_variants_count_too(researcher):
    client = Client()
    _fail(client, "nobody", 5)
    assert "Too many failed logins" in _login(client, "nobody", "x").content.decode()
    _fail(client, "Rita", 3)
    _fail(client, "RITA", 2)
    assert _login(client, "rita", RIGHT).status_code == 429


def test_the_admin_login_is_the_throttled_login_page(admin_user):
    client = Client()
    response = _login(client, "alice", "wrong", path="/admin/login/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not LoginFailure.objects.exists()  # no password was checked there


def test_every_password_check_is_refused_while_locked(researcher):
    """The authentication backend itself refuses a locked pair, whatever calls it."""
    request = RequestFactory().post("/anything", REMOTE_ADDR="10.9.9.9")
    for _ in range(5):
        assert authenticate(request, username="rita", password="wrong") is None
    assert authenticate(request, username="rita", password=RIGHT) is None  # not even by Django's ModelBackend
    elsewhere = RequestFactory().post("/x", REMOTE_ADDR="10.9.9.8")
    assert authenticate(elsewhere, username="rita", password=RIGHT) == researcher


def test_the_address_behind_the_proxy_is_the_one_it_added():
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.1.1.1, 203.0.113.7")
    assert client_address(request) == "10.0.0.1"  # no proxy configured: the header is anyone's to write
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        assert client_address(request) == "203.0.113.7"


def _daphne_address_header(argv):
    """The header daphne takes the client address (REMOTE_ADDR) from with ``argv``; None: the peer's."""
    from daphne.cli import CommandLineInterface

    cli = CommandLineInterface()
    return cli._get_forwarded_host(cli.parser.parse_args(argv[1:]))


def test_the_server_takes_the_client_address_from_x_forwarded_for_only_behind_the_proxy():
    """daphne with --proxy-headers makes the first X-Forwarded-For entry REMOTE_ADDR, whoever sent it:
    served directly, that would let a guesser name a new address for every try."""
    from selfplay_web.management.commands.serve import daphne_argv

    assert _daphne_address_header(daphne_argv("127.0.0.1", 8000, None)) is None
    with override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")):
        assert _daphne_address_header(daphne_argv("127.0.0.1", 8000, None)) == "X-Forwarded-For"
