"""`synth model serve`: serves the wire protocol; a bad base model is a clear error."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app

SERVE = "from synth_pipelines.cli.main import app; app()"


def test_serve_refuses_an_unknown_base_model_without_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["model", "serve", "--base-model", str(tmp_path / "missing")],
        env={"SYNTH_DATA_DIR": str(tmp_path)},
    )
    assert result.exit_code == 2
    assert "unknown base model" in result.output
    assert "Traceback" not in result.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_serve_answers_the_sdk_handshake(tmp_path: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE, "model", "serve", "--port", str(port)],
        # The key the service answers: the one every request below presents.
        env={**os.environ, "SYNTH_DATA_DIR": str(tmp_path), "TINKER_API_KEY": "tml-cli-test"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/v1"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz").json() == {"status": "ok"}:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            assert time.monotonic() < deadline, "the service did not come up"
            time.sleep(0.2)
        headers = {"X-API-Key": "tml-cli-test"}
        config = httpx.post(f"{url}/client/config", json={}, headers=headers).json()
        assert config["pjwt_auth_enabled"] is False
        capabilities = httpx.get(f"{url}/get_server_capabilities", headers=headers).json()
        assert capabilities["supported_models"][0]["model_name"] == "synth/qwen3-tiny"
    finally:
        server.terminate()
        server.wait(timeout=30)
