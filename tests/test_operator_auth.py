"""Operator access in production: every control path asks for a credential.

- The Dagster webserver (UI, GraphQL API, the UI's websocket) listens on loopback and is
  reached only through nginx rendered from `deploy/nginx-dagster.conf`, which checks the
  operator token; a command that launches Dagster work (`synth run regrade`) asks the synth
  gateway, which calls the webserver on loopback.
- The control database is PostgreSQL with password authentication; the CLI without the
  password is refused with one clear line.
- Minting a proxy token takes the signing key; no key, an unreadable key or a key open to
  other users is refused with one clear line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster
import httpx
import pytest
from sqlalchemy import create_engine, text
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from synth_pipelines.control.database import engine_for
from synth_pipelines.services.supervisor import Service, start, stop
from tests.agent_runs import evaluate, one_task_dataset, profile_document
from tests.conftest import PROJECT_ROOT, serving_gateway
from tests.listening_sockets import listeners, session_processes
from tests.live_services import MODEL, platform
from tests.production_services import free_port, postgres_bin_dir

BIN = Path(sys.executable).parent
SYNTH = str(BIN / "synth")
TOKEN = secrets.token_hex(32)
VERSION_QUERY = {"query": "query { version }"}


def _nginx() -> str:
    # Debian installs it in /usr/sbin, which is not on an ordinary user's PATH.
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if found is None:
        pytest.fail("nginx is not installed; run `make setup` (it installs nginx-light)")
    return found


def _render_template(listen: str, upstream: str, token: str) -> str:
    """The template rendered exactly as `docs/deploy.md` says: envsubst over three names."""
    return subprocess.run(
        [
            "envsubst",
            "${SYNTH_DAGSTER_LISTEN} ${SYNTH_DAGSTER_UPSTREAM} ${SYNTH_DAGSTER_TOKEN}",
        ],
        input=(PROJECT_ROOT / "deploy" / "nginx-dagster.conf").read_text(),
        env={
            "PATH": os.environ["PATH"],
            "SYNTH_DAGSTER_LISTEN": listen,
            "SYNTH_DAGSTER_UPSTREAM": upstream,
            "SYNTH_DAGSTER_TOKEN": token,
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _nginx_service(prefix: Path, port: int, upstream: str) -> Service:
    """nginx in the foreground under a private prefix: its own pid file, logs and temp files."""
    for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (prefix / "temp" / temp).mkdir(parents=True, exist_ok=True)
    (prefix / "synth-dagster.conf").write_text(
        _render_template(f"127.0.0.1:{port}", upstream, TOKEN)
    )
    temp_paths = "\n".join(
        f"    {kind}_temp_path {prefix / 'temp' / kind.split('_')[0]};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # As root, nginx's workers would switch to `nobody`, who cannot enter the test's
    # private temporary directory.
    user = "user root;\n" if os.geteuid() == 0 else ""
    (prefix / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'};\n"
        "events { worker_connections 256; }\n"
        "http {\n    access_log off;\n"
        f"{temp_paths}\n    include {prefix / 'synth-dagster.conf'};\n}}\n"
    )
    argv = [_nginx(), "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr"]
    checked = subprocess.run([*argv, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    return Service(
        name="nginx",
        argv=argv,
        health_url=f"http://127.0.0.1:{port}/server_info",
        address=f"http://127.0.0.1:{port}",
    )


@dataclass(frozen=True)
class Gateway:
    url: str
    webserver_url: str
    webserver_pid: int
    env: dict[str, str]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A real Dagster webserver on loopback and a real nginx in front of it."""
    root = tmp_path_factory.mktemp("gateway")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {"SYNTH_DATA_DIR": str(root / "state"), "DAGSTER_HOME": str(home)}
    state_dir = root / "services"
    webserver_port, nginx_port = free_port(), free_port()
    webserver = Service(
        name="dagster-webserver",
        argv=[
            str(BIN / "dagster-webserver"),
            "-w",
            str(PROJECT_ROOT / "workspace.yaml"),
            "-h",
            "127.0.0.1",
            "-p",
            str(webserver_port),
        ],
        health_url=f"http://127.0.0.1:{webserver_port}/server_info",
        address=f"http://127.0.0.1:{webserver_port}",
        env={**env, "DAGSTER_HOME": str(home)},
        ready_timeout_sec=300,
    )
    nginx = _nginx_service(root / "nginx", nginx_port, f"127.0.0.1:{webserver_port}")
    try:
        webserver_pid, _ = start(state_dir, webserver, cwd=PROJECT_ROOT)
        start(state_dir, nginx, cwd=root)
        yield Gateway(nginx.address, webserver.address, webserver_pid, env)
    finally:
        stop(state_dir, nginx)
        stop(state_dir, webserver)


def _without_nonces(page: str) -> str:
    """The UI page less the nonces (32 hex digits) the webserver draws for every response."""
    return re.sub(r"[0-9a-f]{32}", "", page)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_dagster_without_the_operator_token_answers_401(gateway):
    for headers in ({}, _bearer(TOKEN[:-1]), {"Authorization": "Bearer"}, {"Authorization": TOKEN}):
        page = httpx.get(f"{gateway.url}/", headers=headers)
        api = httpx.post(f"{gateway.url}/graphql", json=VERSION_QUERY, headers=headers)
        assert (page.status_code, api.status_code) == (401, 401), headers
        assert page.headers["www-authenticate"] == 'Bearer realm="synth-dagster"'
    wrong_cookie = httpx.get(f"{gateway.url}/", cookies={"synth_dagster_token": "0" * 64})
    assert wrong_cookie.status_code == 401


def test_the_operator_token_opens_the_ui_and_the_graphql_api(gateway):
    page = httpx.get(f"{gateway.url}/", headers=_bearer(TOKEN))
    assert page.status_code == 200
    assert ">Dagster</title>" in page.text
    direct = httpx.get(f"{gateway.webserver_url}/").text
    assert _without_nonces(page.text) == _without_nonces(direct)
    api = httpx.post(f"{gateway.url}/graphql", json=VERSION_QUERY, headers=_bearer(TOKEN))
    assert api.status_code == 200
    assert api.json() == {"data": {"version": dagster.__version__}}


def test_a_browser_with_the_token_cookie_gets_the_ui_and_its_websocket(gateway):
    cookie = {"Cookie": f"synth_dagster_token={TOKEN}"}
    assert httpx.get(f"{gateway.url}/", headers=cookie).status_code == 200
    socket_url = gateway.url.replace("http://", "ws://") + "/graphql"
    with connect(socket_url, additional_headers=cookie, subprotocols=["graphql-ws"]) as socket:
        socket.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(socket.recv(timeout=30)) == {"type": "connection_ack"}
    with pytest.raises(InvalidStatus) as refused:
        connect(socket_url, subprotocols=["graphql-ws"])
    assert refused.value.response.status_code == 401


def test_the_webserver_behind_nginx_listens_on_loopback_only(gateway):
    found = listeners(session_processes({gateway.webserver_pid}))
    assert {listener.port for listener in found} >= {int(gateway.webserver_url.rsplit(":", 1)[1])}
    assert [listener for listener in found if not listener.loopback] == []


@pytest.fixture
def gateway_state(gateway, monkeypatch) -> Gateway:
    """This process's settings pointed at the state the gateway's webserver serves."""
    for name, value in gateway.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SYNTH_DATABASE_URL", raising=False)
    monkeypatch.delenv("SYNTH_OBJECT_STORE_URL", raising=False)
    engine_for.cache_clear()
    yield gateway
    engine_for.cache_clear()


def _synth(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SYNTH, *args],
        env={**os.environ, **env},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_regrade_reaches_the_webserver_through_the_synth_gateway_only(
    gateway_state, tmp_path, monkeypatch
):
    run = evaluate(
        one_task_dataset(tmp_path, "update-version-file"), profile_document("oracle.json")
    )
    # The synth gateway calls the webserver on loopback; the operator holds no Dagster
    # token, only the gateway's key.
    monkeypatch.setenv("SYNTH_DAGSTER_URL", gateway_state.webserver_url)
    monkeypatch.delenv("SYNTH_DAGSTER_TOKEN", raising=False)
    with serving_gateway(monkeypatch):
        right = _synth({}, "run", "regrade", run.run_id, "--json")
    assert right.returncode == 0, right.stderr
    backfill_id = json.loads(right.stdout)["backfill_id"]
    # Through nginx, the backfill is read only with the operator token.
    refused = httpx.post(f"{gateway_state.url}/graphql", json=VERSION_QUERY)
    assert refused.status_code == 401
    status = httpx.post(
        f"{gateway_state.url}/graphql",
        json={
            "query": "query($id: String!) { partitionBackfillOrError(backfillId: $id) "
            "{ __typename ... on PartitionBackfill { id partitionNames } } }",
            "variables": {"id": backfill_id},
        },
        headers=_bearer(TOKEN),
    ).json()["data"]["partitionBackfillOrError"]
    assert status == {
        "__typename": "PartitionBackfill",
        "id": backfill_id,
        "partitionNames": [f"{run.run_id}.b0000"],
    }


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
