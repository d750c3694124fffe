"""`synth gateway serve --listen HOST:PORT` serves HTTPS: with a certificate made at its
first start by an authority the state directory keeps, which the CLI trusts through
`SYNTH_GATEWAY_CA`; without that authority the CLI refuses the connection in one line.
A restart keeps the authority, so a CA file handed to operators stays good."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from synth_pipelines.config import Settings
from synth_pipelines.contracts.operator_key import KeyRequest
from synth_pipelines.control.database import control_engine, create_tables
from synth_pipelines.control.operator_keys import create_key
from synth_pipelines.credentials import load_secret
from tests.production_services import free_port

SYNTH = str(Path(sys.executable).parent / "synth")


def serving_gateway(listen: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [SYNTH, "gateway", "serve", "--listen", listen],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    authority = Settings().gateway_tls_dir / "ca.pem"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            if authority.exists():
                httpx.get(f"https://{listen}/health", verify=str(authority), timeout=1)
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError("the gateway did not start")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SYNTH, *args], env=env, capture_output=True, text=True, timeout=60)


def test_the_gateway_serves_https_the_cli_trusts_by_its_authority(state):
    settings = Settings()
    create_tables(control_engine(settings))
    admin = create_key(
        control_engine(settings),
        load_secret(settings.gateway_secret_path),
        KeyRequest(owner="root", org="ops", role="admin"),
    ).secret
    listen = f"127.0.0.1:{free_port()}"
    authority = settings.gateway_tls_dir / "ca.pem"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    env |= {"SYNTH_GATEWAY_URL": f"https://{listen}", "SYNTH_API_KEY": admin}
    process = serving_gateway(listen)
    try:
        issued = authority.read_bytes()
        assert (
            oct(settings.gateway_tls_dir.joinpath("server.key").stat().st_mode & 0o777) == "0o600"
        )
        trusted = cli({**env, "SYNTH_GATEWAY_CA": str(authority)}, "admin", "key", "list", "--json")
        assert trusted.returncode == 0, trusted.stderr
        untrusted = cli(env, "admin", "key", "list")
        assert untrusted.returncode == 2 and len(untrusted.stderr.strip().splitlines()) == 1
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        assert "SYNTH_GATEWAY_CA" in untrusted.stderr
        plain = cli({**env, "SYNTH_GATEWAY_URL": f"http://{listen}"}, "admin", "key", "list")
        assert plain.returncode == 2
    finally:
        process.terminate()
        process.wait(timeout=30)
    process = serving_gateway(listen)
    try:
        assert authority.read_bytes() == issued
        again = cli({**env, "SYNTH_GATEWAY_CA": str(authority)}, "admin", "key", "list")
        assert again.returncode == 0, again.stderr
    finally:
        process.terminate()
        process.wait(timeout=30)
