"""A sandbox's route relays a bounded number of connections at once.

Each connection the route relays is one on its target, the capture proxy's listener for
sandboxes, which every sandbox shares. Before, the route relayed as many as the sandbox
opened (400 half-open ones, all held). Now one past `MAX_CONNECTIONS` is closed inside as
soon as it is accepted, and a relayed connection the target closes (as the proxy closes
one that sends no whole request in time) is closed inside too, making room again.
"""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.route import MAX_CONNECTIONS


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


BEYOND = 16
TARGET_HOLDS_SEC = 2.0
"""How long the target keeps a connection that sent no whole request, as the proxy does
for its head timeout."""

FLOOD = """
import json, select, socket, time
PORT, COUNT = {port}, {count}
def closed_within(sockets, sec):
    closed, end = set(), time.monotonic() + sec
    while time.monotonic() < end and len(closed) < len(sockets):
        readable, _, _ = select.select([s for s in sockets if s not in closed], [], [], 0.1)
        for s in readable:
            try:
                data = s.recv(100)
            except ConnectionError:
                data = b""
            if not data:
                closed.add(s)
    return closed
flood = []
for _ in range(COUNT):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
    s.sendall(b"POST /v1/mess")
    flood.append(s)
at_once = closed_within(flood, 1.0)
held = [s for s in flood if s not in at_once]
later = closed_within(held, 6.0)
after = socket.create_connection(("127.0.0.1", PORT), timeout=5)
after.sendall(b"ping")
print(json.dumps(dict(at_once=len(at_once), held=len(held), later=len(later),
                      after=after.recv(100).decode())))
"""


def test_a_route_relays_at_most_its_limit_and_frees_what_the_target_drops(tmp_path):
    most_open, now_open = [0], [0]

    async def target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        now_open[0] += 1
        most_open[0] = max(most_open[0], now_open[0])
        try:
            data = await reader.read(100)
            if data == b"ping":
                writer.write(b"pong")
                await writer.drain()
            else:
                await asyncio.sleep(TARGET_HOLDS_SEC)
        finally:
            now_open[0] -= 1
            writer.close()

    async def scenario():
        path = tmp_path / "target.sock"
        server = await asyncio.start_unix_server(target, path)
        environment = make_environment(make_task(tmp_path), tmp_path / "trial")
        await environment.start(force_build=False)
        try:
            await environment.open_route(8768, path)
            script = FLOOD.format(port=8768, count=MAX_CONNECTIONS + BEYOND)
            encoded = base64.b64encode(script.encode()).decode()
            return await environment.exec(
                f"python3 -c \"import base64; exec(base64.b64decode('{encoded}'))\""
            )
        finally:
            await environment.stop(delete=True)
            server.close()

    result = asyncio.run(scenario())
    assert result.return_code == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {
        "at_once": BEYOND,
        "held": MAX_CONNECTIONS,
        "later": MAX_CONNECTIONS,
        "after": "pong",
    }
    assert most_open[0] == MAX_CONNECTIONS
