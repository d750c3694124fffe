"""The sandbox has no network: not the host's loopback, not any other interface."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from sandbox_support import isolated_state, make_environment, make_task

PROBE = """python3 - <<'PY'
import socket
try:
    socket.create_connection(("{host}", {port}), timeout=3).close()
    print("connected")
except OSError as error:
    print("refused", type(error).__name__, error)
PY"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


@pytest.fixture
def host_listener():
    """A real TCP server on the host's loopback that records every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[tuple[str, int]] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer)
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def test_sandbox_cannot_reach_host_loopback(tmp_path, host_listener):
    port, accepted = host_listener
    with socket.create_connection(("127.0.0.1", port), timeout=3):
        pass  # the listener really is reachable from the host
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def probe():
        await environment.start(force_build=False)
        try:
            return await environment.exec(PROBE.format(host="127.0.0.1", port=port))
        finally:
            await environment.stop(delete=True)

    result = asyncio.run(probe())
    assert result.stdout.startswith("refused ConnectionRefusedError"), result
    assert len(accepted) == 1  # only the host's own check above


def test_sandbox_has_only_its_own_loopback_interface(tmp_path):
    host_address = socket.gethostbyname(socket.gethostname())
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def probe():
        await environment.start(force_build=False)
        try:
            interfaces = await environment.exec("ls /sys/class/net 2>/dev/null; cat /proc/net/dev")
            outbound = await environment.exec(PROBE.format(host=host_address, port=22))
            return interfaces, outbound
        finally:
            await environment.stop(delete=True)

    interfaces, outbound = asyncio.run(probe())
    names = {line.split(":")[0].strip() for line in interfaces.stdout.splitlines() if ":" in line}
    assert names == {"lo"}
    assert outbound.stdout.startswith("refused"), outbound
