"""The embedded default listens on loopback only: every socket `synth up` opens.

`synth up` is run for real (model service, capture proxy, Dagster daemon and webserver,
and whatever they spawn: proxy workers, Dagster code servers), and the listening sockets
of all those processes are read from the kernel.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.embedded_environment import ADDRESSES, embedded_environment, synth
from tests.listening_sockets import listeners, session_processes


@pytest.fixture
def embedded_env(tmp_path: Path) -> dict[str, str]:
    return embedded_environment(tmp_path, ADDRESSES)


@pytest.mark.slow
def test_every_service_synth_up_starts_listens_on_loopback_only(embedded_env):
    started = synth(embedded_env, "up", "--json")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        rows = json.loads(started.stdout)
        services = {row["service"]: row["pid"] for row in rows}
        assert set(services) == {
            "model-service",
            "capture-proxy",
            "gateway",
            "dagster-code-server",
            "dagster-daemon",
            "dagster-webserver",
        }
        found = listeners(session_processes(set(services.values())))
        for name in ("model-service", "capture-proxy", "gateway", "dagster-webserver"):
            assert any(listener.pid == services[name] for listener in found), name
        configured = {int(embedded_env[variable].rsplit(":", 1)[1]) for variable in ADDRESSES}
        assert configured <= {listener.port for listener in found}
        assert [listener for listener in found if not listener.loopback] == []
        # `synth up` wrote the local operator's admin key, which the CLI finds by itself.
        (gateway,) = [row for row in rows if row["service"] == "gateway"]
        assert gateway["address"] == embedded_env["SYNTH_GATEWAY_URL"]
        assert Path(gateway["api_key_file"]).stat().st_mode & 0o777 == 0o600
        keys = synth(embedded_env, "admin", "key", "list", "--json")
        assert keys.returncode == 0, keys.stderr
        assert [(key["owner"], key["role"]) for key in json.loads(keys.stdout)] == [
            ("local", "admin")
        ]
    finally:
        stopped = synth(embedded_env, "down", "--json")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
