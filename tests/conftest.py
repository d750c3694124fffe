"""Shared fixtures: every test gets its own state directory and Dagster home."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.server import gateway_config
from synth_pipelines.cli.command_group import interrupts_by_default
from synth_pipelines.config import Settings
from synth_pipelines.contracts.operator_key import KeyRequest, Role
from synth_pipelines.control.database import control_engine, create_tables, engine_for
from synth_pipelines.control.operator_keys import create_key
from synth_pipelines.credentials import load_secret
from synth_pipelines.sandbox.leases import LEASE_NAME, reclaim_orphans
from synth_pipelines.sandbox.limits import detect_hierarchy
from synth_pipelines.services.operator_key import ensure_operator_key
from synth_pipelines.tinker_local.server import serving

pytest_plugins = ["tests.production_services", "tests.claimed_runs"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATASET = PROJECT_ROOT / "datasets" / "sample"
# Every test's state directory is its own, but the images built from task Dockerfiles
# are a cache shared by the whole suite and kept between runs: a base takes a minute.
os.environ.setdefault("SYNTH_IMAGE_CACHE_DIR", str(PROJECT_ROOT / ".synth" / "images"))


def pytest_configure(config: pytest.Config) -> None:
    # Dagster's in-process execution leaves SIGTERM with SIGINT's disposition: ignored when
    # the suite runs as a background job, and then inherited by every process a test starts.
    interrupts_by_default()


def _wholly_slow(item: pytest.Item) -> bool:
    marks = getattr(item.module, "pytestmark", [])
    return any(mark.name == "slow" for mark in (marks if isinstance(marks, list) else [marks]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `make test` hands each worker whole files in this order (a module's deployment is
    # started once, not on both workers); the files whose every test is slow go first, so
    # that the longest, the Docker deployment's, is never the last thing running while the
    # other worker idles.
    items.sort(key=lambda item: not _wholly_slow(item))


@pytest.fixture(scope="session", autouse=True)
def no_sandbox_outlives_the_session(tmp_path_factory: pytest.TempPathFactory):
    """Reclaim the sandboxes of run workers the fault tests killed: their mounts and
    cgroups would otherwise outlive the session (a later sandbox start would reclaim them
    only in the same state directory)."""
    yield
    leases = tmp_path_factory.getbasetemp().glob(f"**/{LEASE_NAME}")
    for sandboxes in {lease.parent.parent for lease in leases}:
        reclaim_orphans(sandboxes, detect_hierarchy())


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty platform state: control database, object store, work dir, Dagster home."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("SYNTH_DATA_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("SYNTH_DATABASE_URL", raising=False)
    monkeypatch.delenv("SYNTH_OBJECT_STORE_URL", raising=False)
    engine_for.cache_clear()
    yield tmp_path / "state"
    engine_for.cache_clear()


def operator_key(owner: str, role: Role = "operator", org: str = "lab") -> str:
    """A new key of `owner`'s for the state directory the environment names, made as an
    admin would: every gateway over that state directory takes it."""
    settings = Settings()
    engine = control_engine(settings)
    create_tables(engine)
    request = KeyRequest(owner=owner, org=org, role=role)
    return create_key(engine, load_secret(settings.gateway_secret_path), request).secret


class LocalGateway:
    """The state directory's gateway, as `synth up` would serve it, and the keys the CLI
    presents to it."""

    def __init__(self, url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
        self.url = url
        self._settings = settings
        self._monkeypatch = monkeypatch

    def key(self, owner: str, role: Role = "operator", org: str = "lab") -> str:
        """A new key's whole secret, made as an admin would."""
        return operator_key(owner, role, org)

    def act_as(self, owner: str, role: Role = "operator", org: str = "lab") -> str:
        """Make the CLI (in this process and the ones it starts) present a new key of
        `owner`'s; returns the key."""
        key = self.key(owner, role, org)
        self._monkeypatch.setenv("SYNTH_API_KEY", key)
        return key


@contextmanager
def serving_gateway(patch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    """The gateway over the state directory the environment names, and the local
    operator's key in the file where every `synth` command finds it, as after `synth up`:
    the CLI's one way in."""
    settings = Settings()
    engine = control_engine(settings)
    create_tables(engine)
    config = gateway_config(settings)
    ensure_operator_key(engine, config.key_secret, settings.operator_key_path, settings.owner)
    # A gateway served inside another (`live_services.platform` inside `cli_gateway`)
    # hands the CLI back to the outer one when it stops.
    outer = {name: os.environ.get(name) for name in ("SYNTH_GATEWAY_URL", "SYNTH_API_KEY")}
    with serving(create_app(config)) as url:
        patch.setenv("SYNTH_GATEWAY_URL", url)
        patch.delenv("SYNTH_API_KEY", raising=False)
        try:
            yield LocalGateway(url, settings, patch)
        finally:
            for name, value in outer.items():
                if value is None:
                    patch.delenv(name, raising=False)
                else:
                    patch.setenv(name, value)


@pytest.fixture
def cli_gateway(state: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    """The gateway over this test's state directory (`serving_gateway`)."""
    with serving_gateway(monkeypatch) as served:
        yield served


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP listener on the host's loopback (its port), and what connected to it."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[str] = []

    def serve() -> None:
        while True:
            try:
                connection, peer = listener.accept()
            except OSError:
                return
            accepted.append(str(peer))
            connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
    listener.close()
    thread.join(timeout=5)
