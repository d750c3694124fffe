"""A sandbox's single route reaches exactly its target on the host, nothing else."""

from __future__ import annotations

import asyncio
import socket

import pytest
from sandbox_support import isolated_state, make_environment, make_task


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


PROBE = (
    "python3 -c \"import socket,sys; s=socket.create_connection(('127.0.0.1', {port}), timeout=3); "
    "s.sendall(b'ping'); print(s.recv(100).decode())\""
)


def test_route_reaches_its_target_and_no_other_host_port(tmp_path):
    async def scenario():
        async def answer(reader, writer):
            data = await reader.read(100)
            writer.write(b"pong:" + data)
            await writer.drain()
            writer.close()

        target = await asyncio.start_server(answer, "127.0.0.1", 0)
        other = await asyncio.start_server(answer, "127.0.0.1", 0)
        target_port = target.sockets[0].getsockname()[1]
        other_port = other.sockets[0].getsockname()[1]
        environment = make_environment(make_task(tmp_path), tmp_path / "trial")
        await environment.start(force_build=False)
        try:
            url = await environment.open_route(8765, ("127.0.0.1", target_port))
            routed = await environment.exec(PROBE.format(port=8765))
            direct = await environment.exec(PROBE.format(port=other_port))
            same_port = await environment.exec(PROBE.format(port=target_port))
        finally:
            await environment.stop(delete=True)
            target.close()
            other.close()
        return url, routed, direct, same_port

    url, routed, direct, same_port = asyncio.run(scenario())
    assert url == "http://127.0.0.1:8765"
    assert routed.return_code == 0 and routed.stdout.strip() == "pong:ping"
    assert direct.return_code != 0 and "ConnectionRefusedError" in (direct.stderr or "")
    assert same_port.return_code != 0


def test_route_listener_does_not_exist_on_the_host(tmp_path):
    async def scenario():
        environment = make_environment(make_task(tmp_path), tmp_path / "trial")
        await environment.start(force_build=False)
        try:
            await environment.open_route(8766, ("127.0.0.1", 9))
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", 8766))
        finally:
            await environment.stop(delete=True)

    assert asyncio.run(scenario()) != 0


def test_route_reaches_a_unix_socket_on_the_host(tmp_path):
    """How a sandbox reaches the proxy's listener for sandboxes."""

    async def scenario():
        async def answer(reader, writer):
            writer.write(b"pong:" + await reader.read(100))
            await writer.drain()
            writer.close()

        path = tmp_path / "target.sock"
        target = await asyncio.start_unix_server(answer, path)
        environment = make_environment(make_task(tmp_path), tmp_path / "trial")
        await environment.start(force_build=False)
        try:
            await environment.open_route(8767, path)
            return await environment.exec(PROBE.format(port=8767))
        finally:
            await environment.stop(delete=True)
            target.close()

    routed = asyncio.run(scenario())
    assert routed.return_code == 0 and routed.stdout.strip() == "pong:ping"
