import os
import shutil

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore

from selfplay_web.asgi import application


def _session_cookie(user) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


HEADERS = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_websocket_refuses_anonymous():
    comm = WebsocketCommunicator(application, "/ws/runs/1/", headers=HEADERS)
    connected, _ = await comm.connect(timeout=10)
    assert not connected
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_websocket_accepts_a_logged_in_user_and_relays_group_messages(reader):
    from asgiref.sync import sync_to_async
    from channels.layers import get_channel_layer

    cookie = await sync_to_async(_session_cookie)(reader)
    comm = WebsocketCommunicator(application, "/ws/runs/7/", headers=HEADERS + [(b"cookie", cookie.encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    await get_channel_layer().group_send("run-7", {"type": "run.message", "data": {"type": "status", "status": "running"}})
    message = await comm.receive_json_from(timeout=5)
    assert message == {"type": "status", "status": "running"}
    await comm.disconnect()


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)")
def test_browser_logs_in_and_sees_the_dashboard(live_server, reader, tmp_path):
    from playwright.sync_api import sync_playwright

    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        page.goto(f"{live_server.url}/runs/")
        assert "/accounts/login/" in page.url
        page.fill("#id_username", "rob")
        page.fill("#id_password", "pw-rob")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/runs/")
        assert page.locator("nav.mainnav").is_visible()
        page.goto(f"{live_server.url}/")
        page.screenshot(path=str(tmp_path / "home.png"))
        assert "Welcome, rob" in page.content()
        browser.close()
