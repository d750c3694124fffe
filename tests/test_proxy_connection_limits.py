"""The proxy's listeners hold a bounded number of connections, and none for long without a
request.

Before, uvicorn held every connection that sent half a request line until its client
closed it: 400 were all held, 50 still open after 240 s. Now `synth proxy serve` closes a
connection whose request head is not complete within the head timeout, and each listener
(the TCP address, the Unix socket sandboxes reach) closes one past its limit as soon as it
is accepted, before reading from it.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Callable

import httpx
import pytest

from proxy.listener_limits import ListenerLimits
from proxy.server import proxy_config
from synth_pipelines.config import Settings
from tests.live_services import MODEL, Proxy, model_service, set_script, start_served_proxy
from tests.production_services import free_port

pytestmark = pytest.mark.slow

LIMITS = ListenerLimits()
HALF_REQUEST_LINE = b"POST /v1/mess"
BEYOND = 40
"""Connections opened past each listener's limit."""


def half_open(connect: Callable[[], socket.socket], count: int) -> dict[socket.socket, float]:
    """`count` connections that each send half a request line and then nothing, and when
    each was opened."""
    opened = {}
    for _ in range(count):
        sock = connect()
        sock.sendall(HALF_REQUEST_LINE)
        opened[sock] = time.monotonic()
    return opened


def closes(sockets: list[socket.socket], within: float) -> dict[socket.socket, float]:
    """Of `sockets`, those the server closes within `within` seconds, and when (monotonic)."""
    deadline, closed = time.monotonic() + within, {}
    while time.monotonic() < deadline and len(closed) < len(sockets):
        readable, _, _ = select.select([s for s in sockets if s not in closed], [], [], 0.2)
        for sock in readable:
            try:
                data = sock.recv(1024)
            except ConnectionError:
                data = b""
            assert data == b"", data
            closed[sock] = time.monotonic()
    return closed


def messages(unix_path: str, token: str) -> list[httpx.Response]:
    """A whole call and a streamed one on one kept-alive connection to the sandboxes' socket."""
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(transport=httpx.HTTPTransport(uds=unix_path)) as sandbox:
        return [
            sandbox.post(
                "http://sandbox/v1/messages",
                json={**body, "stream": stream},
                headers={"x-api-key": token},
                timeout=60,
            )
            for stream in (False, True)
        ]


def test_half_open_connections_are_dropped_and_each_listener_holds_its_limit(state):
    port, unix_path = free_port(), str(Settings().proxy_sandbox_socket)

    def tcp() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port))

    def unix() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(unix_path)
        return sock

    with model_service() as model_url:
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        proxy = start_served_proxy(model_url, port, publish_interval=0.2)
        token = Proxy("", proxy_config(Settings())).token()
        flood: dict[str, dict[socket.socket, float]] = {}
        try:
            flood["tcp"] = half_open(tcp, LIMITS.connections_tcp + BEYOND)
            flood["unix"] = half_open(unix, LIMITS.connections_unix + BEYOND)
            at_once = {name: closes(list(opened), within=1.5) for name, opened in flood.items()}
            held = {
                name: {s: t for s, t in opened.items() if s not in at_once[name]}
                for name, opened in flood.items()
            }
            every_held = {**held["tcp"], **held["unix"]}
            later = closes(list(every_held), within=LIMITS.head_timeout_sec + 5)
            answers = messages(unix_path, token)
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        finally:
            for sock in [s for opened in flood.values() for s in opened]:
                sock.close()
            os.killpg(proxy.pid, signal.SIGTERM)
            proxy.wait()

    assert {name: len(closed) for name, closed in at_once.items()} == {
        "tcp": BEYOND,
        "unix": BEYOND,
    }
    assert {name: len(opened) for name, opened in held.items()} == {
        "tcp": LIMITS.connections_tcp,
        "unix": LIMITS.connections_unix,
    }
    assert len(later) == len(every_held), f"{len(every_held) - len(later)} still held"
    lasted = sorted(later[sock] - every_held[sock] for sock in later)
    # Each held for the head timeout from its own start, not much less or more.
    assert LIMITS.head_timeout_sec - 0.5 <= lasted[0], lasted[:3]
    assert lasted[-1] <= LIMITS.head_timeout_sec + 3, lasted[-3:]
    assert [answer.status_code for answer in answers] == [200, 200]
    assert answers[0].json()["content"][0]["text"] == "ok"
    assert "event: message_stop" in answers[1].text
    assert health.status_code == 200
