"""Operator access in production: every control path asks for a credential.

- The control database is PostgreSQL with password authentication; the CLI without the
  password is refused with one clear line.
- Minting a proxy token takes the signing key; no key, an unreadable key or a key open to
  other users is refused with one clear line.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import PROJECT_ROOT
from tests.live_services import MODEL, platform
from tests.production_services import free_port, postgres_bin_dir

BIN = Path(sys.executable).parent
SYNTH = str(BIN / "synth")


def _synth(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SYNTH, *args],
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@contextmanager
def password_postgres(password: str) -> Iterator[int]:
    """A PostgreSQL server that accepts only scram-sha-256 password logins; yields its port."""
    bin_dir = postgres_bin_dir()
    home = Path(tempfile.mkdtemp(prefix="synth-postgres-auth-"))
    as_server = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    (home / "password").write_text(password)
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
        shutil.chown(home / "password", "postgres")
    data, port = home / "data", free_port()
    subprocess.run(
        [
            *as_server,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "synth",
            "--auth=scram-sha-256",
            f"--pwfile={home / 'password'}",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    pg_ctl = [*as_server, str(bin_dir / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        [
            *pg_ctl,
            "-l",
            str(home / "log"),
            "-o",
            f"-h 127.0.0.1 -p {port} -k {home}",
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield port
    finally:
        subprocess.run([*pg_ctl, "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_a_gateway_without_the_database_password_is_refused_clearly(tmp_path):
    password = secrets.token_hex(16)
    with password_postgres(password) as port:
        admin = create_engine(
            f"postgresql+psycopg2://synth:{password}@127.0.0.1:{port}/postgres",
            isolation_level="AUTOCOMMIT",
        )
        with admin.connect() as conn:
            conn.execute(text("CREATE DATABASE synth_control"))
        admin.dispose()
        gateway_port = free_port()
        base = {
            "SYNTH_DATA_DIR": str(tmp_path / "state"),
            "SYNTH_GATEWAY_URL": f"http://127.0.0.1:{gateway_port}",
        }

        def database(credentials: str) -> dict[str, str]:
            url = f"postgresql+psycopg2://{credentials}@127.0.0.1:{port}/synth_control"
            return {**base, "SYNTH_DATABASE_URL": url}

        for credentials, said in (
            ("synth", "fe_sendauth: no password supplied"),
            ("synth:wrong", 'password authentication failed for user "synth"'),
        ):
            refused = _synth(database(credentials), "gateway", "serve")
            assert refused.returncode == 2, refused.stderr
            assert "the control database at postgresql+psycopg2://synth" in refused.stderr
            assert said in refused.stderr
            assert "check SYNTH_DATABASE_URL" in refused.stderr
            assert "Traceback" not in refused.stderr
        serving = subprocess.Popen(
            [SYNTH, "gateway", "serve"],
            env={**os.environ, **database(f"synth:{password}")},
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert _answers(f"http://127.0.0.1:{gateway_port}/health", serving)
        finally:
            serving.terminate()
            _, stderr = serving.communicate(timeout=30)
        assert password not in stderr


def _answers(url: str, process: subprocess.Popen, timeout_sec: float = 60) -> bool:
    """Whether `url` answers 200 before `process` ends or the time is up."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return True
        except httpx.TransportError:
            time.sleep(0.2)
    return False


def _mint(env: dict[str, str], *, drop_capabilities: bool = False) -> subprocess.CompletedProcess:
    # Root reads any file; without its capabilities it is held to the file's mode like
    # any other user.
    prefix = (
        ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"] if drop_capabilities else []
    )
    argv = [SYNTH, "proxy", "token", "--run", "r1", "--attempt", "a1", "--model", "m", "--json"]
    return subprocess.run(
        [*prefix, *argv],
        env={**{k: v for k, v in os.environ.items() if k != "SYNTH_PROXY_SIGNING_KEY"}, **env},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_minting_a_token_needs_the_signing_key(tmp_path):
    from synth_pipelines.credentials import load_signing_key, verify_token

    env = {"SYNTH_DATA_DIR": str(tmp_path / "state")}
    key_path = tmp_path / "state" / "proxy-signing.key"

    missing = _mint(env)
    assert missing.returncode == 2
    assert f"no proxy signing key at {key_path}" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert not key_path.exists()

    key = load_signing_key(key_path)
    minted = _mint(env)
    assert minted.returncode == 0, minted.stderr
    claims = verify_token(key, json.loads(minted.stdout)["token"])
    assert (claims.run_id, claims.attempt_id, claims.model) == ("r1", "a1", "m")

    key_path.chmod(0o644)
    exposed = _mint(env)
    assert exposed.returncode == 2
    assert "is open to other users (mode 644)" in exposed.stderr

    if os.geteuid() == 0:
        os.chown(key_path, 65534, 65534)
        key_path.chmod(0o600)
        unreadable = _mint(env, drop_capabilities=True)
    else:
        key_path.chmod(0o000)
        unreadable = _mint(env)
    assert unreadable.returncode == 2
    assert f"cannot read the proxy signing key {key_path}: permission denied" in unreadable.stderr
    assert "Traceback" not in unreadable.stderr


@pytest.mark.slow
def test_no_proxy_endpoint_answers_without_a_token(state, monkeypatch):
    """Nothing on the proxy mints tokens or acts for a caller it cannot authenticate:
    every endpoint in its OpenAPI schema but health and metrics answers 401 without one,
    and its one operator endpoint answers 403 to an actor's token."""
    with platform(monkeypatch) as (_model_url, proxy):
        schema = httpx.get(f"{proxy.url}/openapi.json").json()
        open_paths = {"/health", "/metrics"}
        called = []
        for path, methods in schema["paths"].items():
            if path in open_paths:
                continue
            concrete = path.replace("{model_id}", MODEL)
            for method in methods:
                answer = httpx.request(method, f"{proxy.url}{concrete}", json={})
                called.append((method, path, answer.status_code))
        assert called
        assert {status for _method, _path, status in called} == {401}, called
        flush = httpx.post(
            f"{proxy.url}/internal/evidence/flush", json={}, headers={"x-api-key": proxy.token()}
        )
        assert flush.status_code == 403
