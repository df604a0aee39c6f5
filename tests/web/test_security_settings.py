"""Secure settings: `manage.py check --deploy` is clean with DEBUG off, a real SECRET_KEY and a
real host name; plain HTTP on this machine (`make demo`) keeps working; every response carries
the security headers; the session cookie is HttpOnly.

The settings are read at start-up from the environment, so the DEBUG-off cases run Django in
a subprocess with that environment (selfplay_web/settings.py, docs/SECURITY.md).
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest
from django.conf import settings

ROOT = settings.BASE_DIR
KNOBS = ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "SELFPLAY_INSECURE_HTTP", "SELFPLAY_BEHIND_PROXY",
         "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "SECURE_SSL_REDIRECT",
         "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SELFPLAY_PRODUCTION",
         "DJANGO_ALLOW_ASYNC_UNSAFE")  # set by the browser tests of this process; never in a deployment


def _env(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update({"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50), **values})
    return env


def _settings(**values) -> dict:
    """The security settings as a fresh Django process reads them from this environment."""
    names = ["SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS",
             "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_PROXY_SSL_HEADER", "SESSION_COOKIE_HTTPONLY",
             "X_FRAME_OPTIONS", "SECURE_CONTENT_TYPE_NOSNIFF", "SECURE_REFERRER_POLICY"]
    code = ("import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'selfplay_web.settings'; "
            "from django.conf import settings; "
            f"print(json.dumps({{n: getattr(settings, n) for n in {names!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(**values), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_check_deploy_has_no_security_warnings_with_debug_off():
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                         env=_env(ALLOWED_HOSTS="selfplay.example.org"), capture_output=True, text=True, timeout=180)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "security.W" not in text, text[-3000:]


def test_debug_off_on_a_real_host_means_https_everywhere():
    s = _settings(ALLOWED_HOSTS="selfplay.example.org")
    assert s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"] and s["SECURE_SSL_REDIRECT"]
    assert s["SECURE_HSTS_SECONDS"] >= 365 * 24 * 3600 and s["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
    assert s["SESSION_COOKIE_HTTPONLY"] and s["SECURE_CONTENT_TYPE_NOSNIFF"]
    assert s["X_FRAME_OPTIONS"] == "DENY" and s["SECURE_REFERRER_POLICY"] == "same-origin"
    assert s["SECURE_PROXY_SSL_HEADER"] is None  # trusting X-Forwarded-Proto without a proxy would be spoofable


@pytest.mark.parametrize("env", [{}, {"ALLOWED_HOSTS": "selfplay.lan", "SELFPLAY_INSECURE_HTTP": "1"}],
                         ids=["localhost-only", "explicit-insecure-http"])
def test_plain_http_deployment_keeps_working_with_debug_off(env):
    """`DEBUG=0 make demo` on http://127.0.0.1:8000: Secure cookies or an https redirect would
    make logging in impossible there."""
    s = _settings(**env)
    assert not (s["SESSION_COOKIE_SECURE"] or s["CSRF_COOKIE_SECURE"] or s["SECURE_SSL_REDIRECT"])
    assert s["SECURE_HSTS_SECONDS"] == 0
    assert s["SESSION_COOKIE_HTTPONLY"] and s["X_FRAME_OPTIONS"] == "DENY"


def test_behind_a_tls_proxy_and_hsts_are_configurable():
    s = _settings(ALLOWED_HOSTS="selfplay.example.org", SELFPLAY_BEHIND_PROXY="1", SECURE_HSTS_SECONDS="600",
                  SECURE_HSTS_INCLUDE_SUBDOMAINS="0")
    assert s["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert s["SECURE_HSTS_SECONDS"] == 600 and not s["SECURE_HSTS_INCLUDE_SUBDOMAINS"]


def test_a_bad_security_knob_stops_start_up_with_a_clear_message():
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=_env(SELFPLAY_INSECURE_HTTP="maybe"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "SELFPLAY_INSECURE_HTTP='maybe' is not a boolean" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.django_db
def test_responses_carry_the_security_headers_and_the_session_cookie_is_httponly(client, reader):
    page = client.get("/accounts/login/")
    assert page["X-Frame-Options"] == "DENY"
    assert page["X-Content-Type-Options"] == "nosniff"
    assert page["Referrer-Policy"] == "same-origin"
    login = client.post("/accounts/login/", {"username": "rob", "password": "pw-rob"})
    assert login.status_code == 302
    cookie = login.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] and cookie["samesite"] == "Lax"


def test_generated_secrets_are_owner_only_files(tmp_path):
    """SECRET_KEY and the admin password, generated into a fresh data dir, are readable by their owner only."""
    env = _env(SELFPLAY_DATA_DIR=str(tmp_path), SECRET_KEY="")
    code = ("import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'selfplay_web.settings'; "
            "from django.conf import settings; print(len(settings.SECRET_KEY))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and int(out.stdout.split()[-1]) >= 50, out.stderr[-2000:]
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


@pytest.mark.django_db
def test_admin_password_file_is_owner_only_and_passwords_are_validated(tmp_path, monkeypatch):
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError
    from django.core.management import call_command

    monkeypatch.setenv("SELFPLAY_DATA_DIR", str(tmp_path))
    call_command("ensure_admin", "--username", "boss", stdout=open(os.devnull, "w"))
    password_file = tmp_path / "admin_password"
    assert password_file.stat().st_mode & 0o777 == 0o600
    validate_password(password_file.read_text().strip())  # the generated one passes
    for weak in ("password123", "12345678901", "short1"):
        with pytest.raises(ValidationError):
            validate_password(weak)
