"""The operator's endpoint allow-list (trainer/endpoints.py) and the judge client that obeys it.

The client tests talk to a real HTTP server on the loopback that records the Authorization
header of every request it gets.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainer.endpoints import (
    ENV,
    KeyNotAllowed,
    completions_url,
    endpoint_allowed,
    key_may_go,
    parse_allow_list,
    parse_entry,
)
from trainer.judge import EndpointClient

KEY = "sk-operator-1b7d-do-not-leak"


@pytest.mark.parametrize("url, allowed", [
    ("https://api.example.org/v1/chat/completions", True),
    ("https://api.example.org:443/v1/chat/completions", True),  # the default port written out
    ("https://API.example.org/v1/chat/completions", True),  # host names are case-insensitive
    ("https://api.example.org/v1", True),
    ("http://api.example.org/v1/chat/completions", False),  # the entry says https
    ("https://api.example.org:8443/v1/chat/completions", False),  # another port
    ("https://api.example.org/v10/chat/completions", False),  # /v1 matches whole segments only
    ("https://api.example.org/other/chat/completions", False),
    ("https://api.example.org/v1/../admin/chat/completions", False),  # dot segments never match
    ("https://api.example.org/v1/%2e%2e/admin", False),
    ("https://api.example.org.evil.test/v1/chat/completions", False),  # a string prefix is not a host
    ("https://evil.test/api.example.org/v1/chat/completions", False),
    ("https://api.example.org@evil.test/v1/chat/completions", False),  # the host here is evil.test
    ("https://sub.api.example.org/v1/chat/completions", False),  # no subdomains
    ("http://judge.internal:8000/v1/chat/completions", True),  # host:port entry, either scheme
    ("https://judge.internal:8000/anything", True),
    ("http://judge.internal:8001/v1/chat/completions", False),
    ("http://10.0.0.5:1234/v1/chat/completions", True),  # a bare host entry: any port
    ("ftp://10.0.0.5/v1", False),
    ("not a url", False),
])
def test_an_endpoint_is_allowed_only_by_scheme_host_port_and_whole_path_segments(url, allowed):
    entries = parse_allow_list("https://api.example.org/v1/, judge.internal:8000 ,,10.0.0.5")
    assert endpoint_allowed(url, entries) is allowed


def test_an_empty_list_allows_nothing():
    assert parse_allow_list("") == [] and parse_allow_list(" , ") == []
    assert not endpoint_allowed("https://api.example.org/v1/chat/completions", [])


@pytest.mark.parametrize("entry, why", [
    ("ftp://files.example.org", "only http and https"),
    ("https://user:pw@api.example.org/v1", "is not an endpoint"),
    ("https://api.example.org/v1?key=1", "is not an endpoint"),
    ("api.example.org/v1", "a path needs the scheme"),
    ("api.example.org:notaport", "bad port"),
    ("https://", "is not an endpoint"),
])
def test_a_bad_entry_is_named_with_how_to_write_one(entry, why):
    with pytest.raises(ValueError, match=why) as exc:
        parse_entry(entry)
    assert ENV in str(exc.value) and "host[:port]" in str(exc.value)


def test_who_may_receive_which_key():
    listed = {ENV: "https://api.example.org/v1"}
    elsewhere = "http://127.0.0.1:9/v1/chat/completions"
    assert key_may_go("SELFPLAY_JUDGE_API_KEY", elsewhere, {}) is True  # standalone: no list, no restriction
    assert key_may_go("SELFPLAY_JUDGE_API_KEY", elsewhere, listed) is False
    assert key_may_go("SELFPLAY_JUDGE_API_KEY", elsewhere, {ENV: ""}) is False  # set but empty: nowhere
    assert key_may_go("SELFPLAY_JUDGE_API_KEY", "https://api.example.org/v1/chat/completions", listed) is True
    assert key_may_go("SELFPLAY_RUN12_SSP_JUDGE_API_KEY", elsewhere, listed) is True  # the run's own key
    assert key_may_go("SELFPLAY_RUNX_API_KEY", elsewhere, listed) is False
    assert completions_url("http://h/v1/") == "http://h/v1/chat/completions"
    assert completions_url("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


class _Recorder:
    """A /chat/completions server recording Authorization headers; ``redirect_to`` answers 302."""

    def __init__(self, redirect_to: str | None = None):
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                seen.append(self.headers.get("Authorization", ""))
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if redirect_to:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST  # a redirected POST comes back as GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    r = _Recorder()
    yield r
    r.close()


def test_the_client_sends_a_worker_key_only_to_a_listed_endpoint(recorder, monkeypatch):
    monkeypatch.setenv("OPERATOR_API_KEY", KEY)
    monkeypatch.setenv(ENV, "https://api.example.org/v1")
    with pytest.raises(KeyNotAllowed) as exc:
        EndpointClient(recorder.url, "m", api_key_env="OPERATOR_API_KEY", retries=0)
    assert "$OPERATOR_API_KEY" in str(exc.value) and ENV in str(exc.value) and "127.0.0.1" in str(exc.value)
    assert KEY not in str(exc.value)
    # the key (and the list) appearing after the client was built are checked at the request, which is never sent
    monkeypatch.delenv("OPERATOR_API_KEY")
    monkeypatch.delenv(ENV)
    client = EndpointClient(recorder.url, "m", api_key_env="OPERATOR_API_KEY", retries=0)
    monkeypatch.setenv("OPERATOR_API_KEY", KEY)
    monkeypatch.setenv(ENV, "https://api.example.org/v1")
    with pytest.raises(KeyNotAllowed):
        client.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(KeyNotAllowed):
        client.chat_many([[{"role": "user", "content": "hi"}]])  # not swallowed as a failed item
    assert recorder.seen == []
    # listed (host:port entry): the key goes; no key at all: any endpoint, no header
    monkeypatch.setenv(ENV, f"127.0.0.1:{recorder.server.server_port}")
    assert EndpointClient(recorder.url, "m", api_key_env="OPERATOR_API_KEY", retries=0).chat([]) == "ok"
    monkeypatch.delenv(ENV)  # the standalone trainer: any endpoint, no header without a key
    assert EndpointClient(recorder.url, "m", api_key_env="NO_SUCH_API_KEY", retries=0).chat([]) == "ok"
    assert recorder.seen == [f"Bearer {KEY}", ""]


def test_the_client_never_follows_a_redirect_with_the_key(recorder, monkeypatch):
    bouncer = _Recorder(redirect_to=recorder.url + "/chat/completions")
    try:
        monkeypatch.setenv("OPERATOR_API_KEY", KEY)
        monkeypatch.setenv(ENV, f"127.0.0.1:{bouncer.server.server_port}")
        client = EndpointClient(bouncer.url, "m", api_key_env="OPERATOR_API_KEY", retries=0)
        with pytest.raises(Exception, match="HTTP 302"):
            client.chat([{"role": "user", "content": "hi"}])
    finally:
        bouncer.close()
    assert bouncer.seen == [f"Bearer {KEY}"] and recorder.seen == []
