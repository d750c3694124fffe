"""The production deployment's real servers for tests, each its own process.

PostgreSQL is the Debian server started from a fresh `initdb` on a free port (as the
`postgres` user when the tests run as root, since the server refuses root). The
S3-compatible server is `moto_server`. Both start once per test session; every
deployment gets its own databases and bucket on them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import httpx
import pytest
from sqlalchemy import create_engine, text

from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.database import control_engine, create_tables, engine_for
from synth_pipelines.control.runs import get_run
from synth_pipelines.credentials import load_secret
from synth_pipelines.services.operator_key import ensure_operator_key
from synth_pipelines.services.production import as_server_user, postgres_bin_dir
from synth_pipelines.services.supervisor import Service, running_pid, start, stop
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET

POSTGRES_USER = "synth"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "synth-test",
    "AWS_SECRET_ACCESS_KEY": "synth-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_stopped(run_id: str, timeout_sec: float = 480) -> RunRecord:
    """The run once it is no longer accepted or running: finished, or stopped with a reason."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        run = get_run(control_engine(Settings()), run_id)
        if run.status not in ("accepted", "running"):
            return run
        time.sleep(1)
    pytest.fail(f"run {run_id} was still {run.status} after {timeout_sec:.0f} s")


@dataclass(frozen=True)
class PostgresServer:
    port: int

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{POSTGRES_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str) -> str:
        """A new, empty database; returns its SQLAlchemy URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        return self.url(name)


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    bin_dir = postgres_bin_dir()
    home = Path(tempfile.mkdtemp(prefix="synth-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
    data, port = home / "data", free_port()
    subprocess.run(
        as_server_user(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                POSTGRES_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
    )
    subprocess.run(
        as_server_user(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(home / "server.log"),
                "-o",
                f"-h 127.0.0.1 -p {port} -k {home} -F -c max_connections=300",
                "-w",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield PostgresServer(port)
    finally:
        subprocess.run(
            as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(home, ignore_errors=True)


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint_url, **_boto_credentials())

    def create_bucket(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": S3_CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


@contextmanager
def moto_process(argv: list[str], port: int, stop: signal.Signals) -> Iterator[str]:
    """A moto server started with `argv` on `port`, once it answers (the deployment's,
    which checks signatures, refuses the unsigned probe: an answer all the same); its
    endpoint. Ended with `stop` sent to its process group."""
    process = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{endpoint}/moto-api/"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{Path(argv[0]).name} did not start on port {port}")
            time.sleep(0.2)
        yield endpoint
    finally:
        os.killpg(process.pid, stop)
        process.wait(timeout=30)


@contextmanager
def running_s3_server() -> Iterator[S3Server]:
    moto, port = Path(sys.executable).parent / "moto_server", free_port()
    with moto_process([str(moto), "-H", "127.0.0.1", "-p", str(port)], port, signal.SIGTERM) as url:
        yield S3Server(url)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


@dataclass(frozen=True)
class ProductionEnvironment:
    """The variables that make the platform run on PostgreSQL and S3, and where they point."""

    root: Path
    control_url: str
    dagster_url: str
    bucket: str
    s3: S3Server
    env: dict[str, str] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return Path(self.env["SYNTH_DATA_DIR"])

    @property
    def dagster_home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])


def production_environment(
    root: Path, postgres: PostgresServer, s3: S3Server, instance: str = "dagster.production.yaml"
) -> ProductionEnvironment:
    """Fresh databases, a fresh bucket and `instance` (from `dagster_home/`) as the instance."""
    home = root / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "dagster_home" / instance, home / "dagster.yaml")
    control_url = postgres.create_database("control")
    dagster_url = postgres.create_database("dagster")
    bucket = s3.create_bucket("synth")
    env = {
        **S3_CREDENTIALS,
        "DAGSTER_HOME": str(home),
        "SYNTH_DATA_DIR": str(root / "state"),
        "SYNTH_DATABASE_URL": control_url,
        "SYNTH_OBJECT_STORE_URL": f"s3://{bucket}/platform",
        "SYNTH_S3_ENDPOINT_URL": s3.endpoint_url,
        "AWS_ENDPOINT_URL_S3": s3.endpoint_url,
        "SYNTH_DAGSTER_DATABASE_URL": dagster_url,
        "SYNTH_DAGSTER_LOGS_BUCKET": bucket,
        "SYNTH_DAGSTER_URL": f"http://127.0.0.1:{free_port()}",
        "SYNTH_CODE_SERVER_HOST": "127.0.0.1",
        "SYNTH_CODE_SERVER_PORT": str(free_port()),
        "SYNTH_MODEL_SERVICE_URL": (model_service := f"http://127.0.0.1:{free_port()}"),
        "TINKER_BASE_URL": model_service,
        "TINKER_API_KEY": "tml-production-test",
        "SYNTH_PROXY_URL": f"http://127.0.0.1:{free_port()}",
        "SYNTH_GATEWAY_URL": f"http://127.0.0.1:{free_port()}",
        "SYNTH_PROXY_PUBLISH_INTERVAL_SEC": "0.5",
        "TINKER_TELEMETRY": "0",
    }
    return ProductionEnvironment(root, control_url, dagster_url, bucket, s3, env)


@contextmanager
def environment_applied(environment: ProductionEnvironment) -> Iterator[ProductionEnvironment]:
    """This process configured like the deployment's processes, and restored afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.env.items():
            patch.setenv(name, value)
        # boto3's default session keeps the credentials it first read, and a deployment's
        # own S3 server accepts only its own: a new session reads this deployment's.
        patch.setattr(boto3, "DEFAULT_SESSION", None)
        engine_for.cache_clear()
        try:
            yield environment
        finally:
            engine_for.cache_clear()


@pytest.fixture
def production_env(
    tmp_path: Path, postgres_server: PostgresServer, s3_server: S3Server
) -> Iterator[ProductionEnvironment]:
    """This test process configured for PostgreSQL and S3, with nothing in them yet."""
    with environment_applied(production_environment(tmp_path, postgres_server, s3_server)) as env:
        yield env


def _dagster_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@dataclass
class DeploymentCli:
    """An operator's `synth` commands against a running deployment."""

    environment: ProductionEnvironment

    @property
    def state_dir(self) -> Path:
        return self.environment.state_dir

    def publish_sample_dataset(self) -> None:
        """`synth/sample@v1`, published as an operator does (a no-op once it exists)."""
        published = self.synth(
            "dataset", "publish", str(SAMPLE_DATASET), "--name", "synth/sample", "--version", "v1"
        )
        assert published.returncode == 0, published.stderr

    def synth(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """The `synth` CLI as an operator runs it against this deployment."""
        return subprocess.run(
            [sys.executable, "-m", "synth_pipelines.cli", *args],
            cwd=PROJECT_ROOT,
            env={**os.environ, **self.environment.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@dataclass
class ProductionDeployment(DeploymentCli):
    """The documented single-host production layout: a code server, the daemon and the
    webserver as separate processes sharing one PostgreSQL + S3 instance."""

    services: dict[str, Service] = field(default_factory=dict)

    def __post_init__(self) -> None:
        env = self.environment.env
        workspace = str(PROJECT_ROOT / "workspace.production.yaml")
        webserver = env["SYNTH_DAGSTER_URL"].rsplit(":", 1)[1]
        synth = str(Path(sys.executable).parent / "synth")
        model_port = env["SYNTH_MODEL_SERVICE_URL"].rsplit(":", 1)[1]
        self.services = {
            service.name: service
            for service in (
                # Scripted, so training tests can make the model's answers deterministic.
                Service(
                    name="model-service",
                    argv=[synth, "model", "serve", "--scripted", "--port", model_port],
                    health_url=f"{env['SYNTH_MODEL_SERVICE_URL']}/api/v1/healthz",
                    address=env["SYNTH_MODEL_SERVICE_URL"],
                    env=env,
                ),
                Service(
                    name="capture-proxy",
                    argv=[synth, "proxy", "serve", "--workers", "1"],
                    health_url=f"{env['SYNTH_PROXY_URL']}/health",
                    address=env["SYNTH_PROXY_URL"],
                    env=env,
                ),
                Service(
                    name="gateway",
                    argv=[synth, "gateway", "serve"],
                    health_url=f"{env['SYNTH_GATEWAY_URL']}/health",
                    address=env["SYNTH_GATEWAY_URL"],
                    env=env,
                ),
                Service(
                    name="dagster-code-server",
                    argv=[
                        _dagster_bin("dagster"),
                        "code-server",
                        "start",
                        "-m",
                        "synth_pipelines.definitions",
                        "-a",
                        "defs",
                        "--location-name",
                        "synth_pipelines",
                        "-h",
                        env["SYNTH_CODE_SERVER_HOST"],
                        "-p",
                        env["SYNTH_CODE_SERVER_PORT"],
                    ],
                    health_url=None,
                    address=f"{env['SYNTH_CODE_SERVER_HOST']}:{env['SYNTH_CODE_SERVER_PORT']}",
                    env=env,
                ),
                Service(
                    name="dagster-daemon",
                    argv=[_dagster_bin("dagster-daemon"), "run", "-w", workspace],
                    health_url=None,
                    address="(background)",
                    env=env,
                ),
                Service(
                    name="dagster-webserver",
                    argv=[
                        _dagster_bin("dagster-webserver"),
                        "-w",
                        workspace,
                        "-h",
                        "127.0.0.1",
                        "-p",
                        webserver,
                    ],
                    health_url=f"{env['SYNTH_DAGSTER_URL']}/server_info",
                    address=env["SYNTH_DAGSTER_URL"],
                    env=env,
                ),
            )
        }

    def start(self, *names: str) -> None:
        for name in names or tuple(self.services):
            if name == "gateway":
                self._local_operator_key()
            start(self.state_dir, self.services[name], cwd=PROJECT_ROOT)
            if name == "dagster-code-server":
                self._wait_for_code_server()

    def kill(self, *names: str) -> None:
        """SIGKILL each service's whole process group, as a crash or an OOM kill would."""
        for name in names:
            pid = running_pid(self.state_dir, self.services[name])
            assert pid is not None, f"{name} is not running"
            os.killpg(pid, signal.SIGKILL)
            while running_pid(self.state_dir, self.services[name]) == pid:
                time.sleep(0.1)

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            stop(self.state_dir, service)

    def _local_operator_key(self) -> None:
        """The local operator's admin key, where the deployment's CLI finds it, as
        `synth up --production` writes it."""
        with environment_applied(self.environment):
            settings = Settings()
            engine = control_engine(settings)
            create_tables(engine)
            secret = load_secret(settings.gateway_secret_path)
            ensure_operator_key(engine, secret, settings.operator_key_path, settings.owner)

    def _wait_for_code_server(self) -> None:
        address = (
            self.environment.env["SYNTH_CODE_SERVER_HOST"],
            int(self.environment.env["SYNTH_CODE_SERVER_PORT"]),
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(address, timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"the code server did not listen on {address} within 120 s")


@pytest.fixture(scope="module")
def production_deployment(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    s3_server: S3Server,
) -> Iterator[ProductionDeployment]:
    """Code server, daemon and webserver on PostgreSQL + S3, shared by a test module."""
    root = tmp_path_factory.mktemp("production")
    deployment = ProductionDeployment(production_environment(root, postgres_server, s3_server))
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def production(production_deployment: ProductionDeployment) -> Iterator[ProductionDeployment]:
    """The running deployment, with this test process configured to talk to it."""
    with environment_applied(production_deployment.environment):
        yield production_deployment
