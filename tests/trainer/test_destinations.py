"""Where a web run may call at all (trainer/endpoints.py: destination_problem, the client's checks on a worker).

Finding: a judge or meta-harness endpoint could be any internal host when the run carried its own key; the worker
POSTed to a listener on http://127.0.0.1:18099 with the key as a Bearer token, and its error messages told which ports
answered. The servers here are real sockets on the loopback.
"""
from __future__ import annotations

import socket
import threading

import pytest

import trainer.endpoints as endpoints
from trainer.endpoints import ENV, DestinationNotAllowed, destination_problem, parse_allow_list
from trainer.judge import EndpointClient
from trainer.method_configs import check_endpoint


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:18099/v1/chat/completions", "http://localhost:8000/v1", "http://[::1]/v1",
    "http://[::ffff:127.0.0.1]/v1", "http://0.0.0.0/v1", "http://2130706433/v1", "http://0x7f.1/v1",  # 127.0.0.1
    "http://10.1.2.3/v1", "http://172.16.0.1/v1", "http://192.168.1.10/v1", "http://100.64.0.1/v1",  # private, CGNAT
    "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/v1", "http://[fd00::1]/v1",  # link-local, ULA
    "http://224.0.0.1/v1", "http://240.0.0.1/v1",  # multicast, reserved
])
def test_internal_addresses_are_refused_unless_listed(url):
    why = destination_problem(url, [])
    assert why and "internal address" in why and ENV in why
    host = url.split("//")[1].split("/")[0]  # a host[:port] entry of the operator's list lets it through
    assert destination_problem(url, parse_allow_list(host)) is None


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://files.example.org/v1", "gopher://127.0.0.1:6379/_x",
                                 "http:///v1"])
def test_other_schemes_are_refused_at_launch_and_on_the_worker(url):
    assert "is not an http(s) URL" in destination_problem(url, parse_allow_list("127.0.0.1"))
    with pytest.raises(ValueError, match="must be an http"):  # the config itself, whoever launches
        check_endpoint(url)


def test_a_name_is_judged_by_every_address_it_resolves_to():
    resolve = {"judge.example.org": ["93.184.216.34"], "mixed.example.org": ["93.184.216.34", "10.0.0.7"],
               "rebind.example.org": ["127.0.0.1"]}
    problem = lambda url: destination_problem(url, [], resolve=lambda host, port: resolve.get(host, []))  # noqa: E731
    assert problem("https://judge.example.org/v1") is None
    assert "internal address" in problem("https://mixed.example.org/v1")
    assert "internal address" in problem("https://rebind.example.org/v1")
    assert "cannot be resolved" in problem("https://nowhere.example.org/v1")
    assert problem("https://93.184.216.34/v1") is None  # a public address literal


class _Listener:
    """A loopback TCP listener that accepts and then never answers (a filtered/slow port looks like this)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        try:
            while True:
                self.conns.append(self.sock.accept()[0])
        except OSError:
            pass

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_worker_refuses_an_internal_endpoint_before_connecting(monkeypatch):
    listener = _Listener()
    try:
        monkeypatch.setenv(ENV, "")  # a web worker with no list
        monkeypatch.setenv("SELFPLAY_RUN1_SSP_JUDGE_API_KEY", "sk-run-own-key")
        with pytest.raises(DestinationNotAllowed, match="internal address"):
            EndpointClient(f"http://127.0.0.1:{listener.port}/v1", "m", api_key_env="SELFPLAY_RUN1_SSP_JUDGE_API_KEY", retries=0)
        monkeypatch.setenv(ENV, f"127.0.0.1:{listener.port}")  # listed by the operator: allowed
        EndpointClient(f"http://127.0.0.1:{listener.port}/v1", "m", api_key_env="SELFPLAY_RUN1_SSP_JUDGE_API_KEY", retries=0)
    finally:
        listener.close()
    assert listener.conns == []  # nothing ever connected


def test_a_worker_error_does_not_tell_an_open_port_from_a_closed_one(monkeypatch):
    """An unlisted endpoint's failures read the same whether the port is closed, or open and silent. (The loopback
    stands in for a public host here: public_address is widened to it, the client's sockets are real.)"""
    monkeypatch.setenv(ENV, "")
    monkeypatch.setattr(endpoints, "public_address", lambda address: address == "127.0.0.1")
    listener = _Listener()
    messages = []
    try:
        for port in (_closed_port(), listener.port):
            client = EndpointClient(f"http://127.0.0.1:{port}/v1", "m", api_key_env="", retries=0, timeout=0.5)
            with pytest.raises(Exception) as exc:
                client.chat([{"role": "user", "content": "hi"}])
            messages.append(str(exc.value).replace(str(port), "PORT"))
    finally:
        listener.close()
    assert messages[0] == messages[1] and endpoints.UNREACHABLE in messages[0], messages


def test_a_worker_connects_only_to_the_address_it_checked(monkeypatch):
    """A name that resolves to an internal address by the time of the request (DNS rebinding) is refused at the
    socket, before anything is sent."""
    listener = _Listener()
    monkeypatch.setenv(ENV, "")
    real = socket.getaddrinfo
    # the checks before the request see a public address; the connection's lookup then gets the loopback
    monkeypatch.setattr(endpoints, "_resolve", lambda host, port: ["93.184.216.34"])
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: (
        [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))] if host == "rebind.example.org"
        else real(host, port, *a, **k)))
    try:
        client = EndpointClient(f"http://rebind.example.org:{listener.port}/v1", "m", api_key_env="", retries=0,
                                timeout=0.5)
        with pytest.raises(Exception, match="cannot reach"):
            client.chat([{"role": "user", "content": "hi"}])
    finally:
        listener.close()
    assert listener.conns == []
