"""The production-shaped deployment on one host, which `synth up --production` starts.

PostgreSQL (the control database and Dagster's storage), an S3-compatible server (the
bucket), the capture proxy, the model service (unless a Tinker service is named), a
long-lived Dagster code server, the daemon and the webserver, with Dagster's
`DockerRunLauncher` running every Dagster run in a container of the project's image.

Everything it keeps is under one directory, `<state dir>/production`: the database's
files, the bucket's journal, the Dagster home, the services' pid files and logs, and
`deployment.env`, the variables every process of the deployment and every operator's
`synth` command reads. The file is written on the first start (free ports, new
credentials, a new proxy signing key) and read on every later one; edit it to change the
deployment. Values of the starting environment for `OPERATOR_CHOSEN` are taken when the
file is first written.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from synth_pipelines.config import DAGSTER_UI_PATH
from synth_pipelines.services.embedded import MODEL_SERVICE
from synth_pipelines.services.supervisor import Service

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

BUCKET = "synth"
DATABASE_USER = "synth"
CONTROL_DATABASE = "synth_control"
DAGSTER_DATABASE = "dagster"
# Chosen by whoever starts the deployment the first time, then kept in its file.
OPERATOR_CHOSEN = (
    "SYNTH_ADMISSION_POOL",
    "SYNTH_POOL_MAX_ACTIVE_ATTEMPTS",
    "SYNTH_BASE_MODEL",
    "TINKER_BASE_URL",
    "TINKER_API_KEY",
)
# Where the project's image and the engine that runs it are: set on every start, since
# the image is rebuilt whenever the code changes.
PER_START = ("SYNTH_PROJECT_IMAGE", "DOCKER_HOST", "DOCKER_CONFIG")


POSTGRES, S3 = "postgres", "s3"
LOCAL_SERVERS = "SYNTH_PRODUCTION_LOCAL_SERVERS"


class ProductionError(RuntimeError):
    pass


@dataclass(frozen=True)
class ProductionLayout:
    root: Path

    @classmethod
    def under(cls, state_dir: Path) -> ProductionLayout:
        """The deployment of the operator whose state directory is `state_dir`."""
        return cls(state_dir / "production")

    @property
    def env_file(self) -> Path:
        return self.root / "deployment.env"

    @property
    def postgres_dir(self) -> Path:
        return self.root / "postgres"

    @property
    def postgres_data(self) -> Path:
        return self.postgres_dir / "data"

    @property
    def s3_journal(self) -> Path:
        return self.root / "s3" / "journal.jsonl"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        # An IPv4 socket's address is (host, port).
        port: int = sock.getsockname()[1]
        return port


def read_env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = shlex.split(line)[0].partition("=")
            values[name] = value
    return values


def _write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """Atomically, readable by its owner only: it holds the signing key and passwords."""
    lines = [
        "# The production deployment's variables (`synth up --production`). Use them with",
        f"#   set -a; . {path}; set +a",
        *(f"{name}={shlex.quote(value)}" for name, value in sorted(values.items())),
    ]
    scratch = path.with_name(path.name + ".new")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as sink:
        sink.write("\n".join(lines) + "\n")
    os.replace(scratch, path)


def _new_environment(
    layout: ProductionLayout, chosen: Mapping[str, str], pool_attempts: int
) -> dict[str, str]:
    postgres = f"{DATABASE_USER}:{secrets.token_hex(16)}@127.0.0.1:{_free_port()}"
    s3 = f"http://127.0.0.1:{_free_port()}"
    model_service = chosen.get("TINKER_BASE_URL") or f"http://127.0.0.1:{_free_port()}"
    return {
        "DAGSTER_HOME": str(layout.dagster_home),
        "SYNTH_DATA_DIR": str(layout.root),
        "SYNTH_DATABASE_URL": f"postgresql+psycopg2://{postgres}/{CONTROL_DATABASE}",
        "SYNTH_DAGSTER_DATABASE_URL": f"postgresql+psycopg2://{postgres}/{DAGSTER_DATABASE}",
        "SYNTH_OBJECT_STORE_URL": f"s3://{BUCKET}/platform",
        "SYNTH_DAGSTER_LOGS_BUCKET": BUCKET,
        "SYNTH_S3_ENDPOINT_URL": s3,
        "AWS_ENDPOINT_URL_S3": s3,
        "AWS_ACCESS_KEY_ID": "synth",
        "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16),
        "AWS_DEFAULT_REGION": "us-east-1",
        # On loopback under the prefix the gateway serves the UI at: operators reach it
        # only through the gateway.
        "SYNTH_DAGSTER_URL": f"http://127.0.0.1:{_free_port()}{DAGSTER_UI_PATH}",
        "SYNTH_PROXY_URL": f"http://127.0.0.1:{_free_port()}",
        "SYNTH_GATEWAY_URL": f"http://127.0.0.1:{_free_port()}",
        "SYNTH_PROXY_SIGNING_KEY": secrets.token_hex(32),
        "SYNTH_MODEL_SERVICE_URL": model_service,
        "TINKER_BASE_URL": model_service,
        "TINKER_API_KEY": chosen.get("TINKER_API_KEY") or f"tml-{secrets.token_hex(8)}",
        "SYNTH_ADMISSION_POOL": socket.gethostname(),
        "SYNTH_POOL_MAX_ACTIVE_ATTEMPTS": str(pool_attempts),
        "TINKER_TELEMETRY": "0",
        # Read only by `synth up --production`: the servers it runs itself. Take one out
        # (and point its variables elsewhere) to use a database or bucket of your own.
        LOCAL_SERVERS: ",".join(
            name
            for name in (POSTGRES, S3, MODEL_SERVICE)
            if name != MODEL_SERVICE or not chosen.get("TINKER_BASE_URL")
        ),
        **{name: chosen[name] for name in OPERATOR_CHOSEN if chosen.get(name)},
    }


def deployment_environment(
    layout: ProductionLayout,
    starting: Mapping[str, str],
    per_start: Mapping[str, str],
    pool_attempts: int,
) -> dict[str, str]:
    """The deployment's variables: its file's (written now on a first start, with
    `pool_attempts` as the host's budget unless the starting environment chose one), with
    this start's image and engine."""
    layout.root.mkdir(parents=True, exist_ok=True)
    values = (
        read_env_file(layout.env_file)
        if layout.env_file.exists()
        else _new_environment(layout, starting, pool_attempts)
    )
    values.update(per_start)
    # A deployment made before the UI was served through the gateway: its webserver moves
    # under the prefix.
    if not urlsplit(values["SYNTH_DAGSTER_URL"]).path.strip("/"):
        values["SYNTH_DAGSTER_URL"] = values["SYNTH_DAGSTER_URL"].rstrip("/") + DAGSTER_UI_PATH
    _write_env_file(layout.env_file, values)
    return values


def local_servers(values: Mapping[str, str]) -> set[str]:
    """Which of the database, the bucket's server and the model service the deployment
    runs itself (`postgres`, `s3`, `model-service`)."""
    return set(filter(None, values.get(LOCAL_SERVERS, "").split(",")))


def postgres_bin_dir() -> Path:
    """Where `initdb` and `postgres` are: on PATH, else Debian's newest versioned directory."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    debian = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not debian:
        raise ProductionError("PostgreSQL is not installed; run `make setup`")
    return Path(max(debian, key=lambda path: int(Path(path).parent.parent.name))).parent


def as_server_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _database_url(values: Mapping[str, str]) -> URL:
    from sqlalchemy.engine import make_url

    return make_url(values["SYNTH_DATABASE_URL"])


def let_postgres_pass(layout: ProductionLayout, values: Mapping[str, str]) -> None:
    """Let the deployment's own PostgreSQL, which runs as the `postgres` user when started
    by root, through to its directory: the state directory and the deployment's are their
    owner's alone (0700), so they are given to the server's group with passage only
    (0710: it may pass, not list or read); every other user still has nothing."""
    if POSTGRES not in local_servers(values) or os.geteuid() != 0:
        return
    group = pwd.getpwnam("postgres").pw_gid
    for directory in (layout.root.parent, layout.root):
        os.chown(directory, -1, group)
        directory.chmod(0o710)


def initialize_postgres(layout: ProductionLayout, values: Mapping[str, str]) -> bool:
    """Make the database cluster unless it exists (or the database is not the deployment's
    own); returns whether it was made now."""
    if POSTGRES not in local_servers(values) or (layout.postgres_data / "PG_VERSION").exists():
        return False
    layout.postgres_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    layout.postgres_dir.chmod(0o700)
    password_file = layout.postgres_dir / "initial-password"
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as sink:
        sink.write(f"{_database_url(values).password}\n")
    if os.geteuid() == 0:
        shutil.chown(layout.postgres_dir, "postgres")
        shutil.chown(password_file, "postgres")
    try:
        made = subprocess.run(
            as_server_user(
                [
                    str(postgres_bin_dir() / "initdb"),
                    "-D",
                    str(layout.postgres_data),
                    "-U",
                    DATABASE_USER,
                    "--pwfile",
                    str(password_file),
                    # The socket directory is the server user's own; TCP needs the password.
                    "--auth-local=peer",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                ]
            ),
            capture_output=True,
            text=True,
        )
    finally:
        password_file.unlink(missing_ok=True)
    if made.returncode != 0:
        last = (made.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ProductionError(f"initdb in {layout.postgres_data} failed: {last}")
    return True


def server_services(layout: ProductionLayout, values: Mapping[str, str]) -> list[Service]:
    """The database and the bucket's server, which every other service needs first: those
    of them the deployment runs itself (a database of the operator's own needs no local
    PostgreSQL installed)."""
    local = local_servers(values)
    servers = []
    if POSTGRES in local:
        servers.append(_postgres_service(layout, values))
    if S3 in local:
        servers.append(_s3_service(layout, values))
    return servers


def _postgres_service(layout: ProductionLayout, values: Mapping[str, str]) -> Service:
    database = _database_url(values)
    host, port = database.host or "127.0.0.1", database.port or 5432
    return Service(
        name=POSTGRES,
        argv=as_server_user(
            [
                str(postgres_bin_dir() / "postgres"),
                "-D",
                str(layout.postgres_data),
                "-h",
                host,
                "-p",
                str(port),
                "-k",
                str(layout.postgres_dir),
                "-c",
                "max_connections=300",
            ]
        ),
        # The server makes its socket once it accepts connections.
        health_url=f"unix://{layout.postgres_dir}/.s.PGSQL.{port}",
        address=f"{host}:{port}",
        stop_signal=signal.SIGINT,  # "fast" shutdown: ends sessions, then stops cleanly
    )


def _s3_service(layout: ProductionLayout, values: Mapping[str, str]) -> Service:
    s3 = values["SYNTH_S3_ENDPOINT_URL"]
    return Service(
        name=S3,
        argv=[
            sys.executable,
            "-m",
            "synth_pipelines.services.journaled_s3",
            "--host",
            "127.0.0.1",
            "--port",
            s3.rsplit(":", 1)[1],
            "--journal",
            str(layout.s3_journal),
        ],
        # Any answer is readiness, a refusal (403) included: the server listens only once
        # its journal is replayed, and it refuses moto's own API (`/moto-api/`) to everyone.
        health_url=f"{s3}/",
        address=s3,
        # The key pair it accepts, the clients' own: in its environment, not its command
        # line, which any user of the host may read.
        env={
            "AWS_ACCESS_KEY_ID": values["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": values["AWS_SECRET_ACCESS_KEY"],
        },
    )


def create_databases(values: Mapping[str, str], timeout_sec: float = 60.0) -> list[str]:
    """The control and Dagster databases, made unless they exist; returns those made."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    admin_url = _database_url(values).set(database="postgres")
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    deadline = time.monotonic() + timeout_sec
    try:
        while True:
            try:
                with engine.connect() as connection:
                    existing = set(
                        connection.execute(text("SELECT datname FROM pg_database")).scalars()
                    )
                    made = [
                        name
                        for name in (CONTROL_DATABASE, DAGSTER_DATABASE)
                        if name not in existing
                    ]
                    for name in made:
                        connection.execute(text(f'CREATE DATABASE "{name}"'))
                    return made
            except OperationalError as error:  # the server may still be recovering
                if time.monotonic() > deadline:
                    raise ProductionError(
                        f"PostgreSQL did not accept connections: {error.orig}"
                    ) from error
                time.sleep(0.5)
    finally:
        engine.dispose()


def create_bucket(values: Mapping[str, str]) -> bool:
    """The deployment's bucket, made unless it exists; returns whether it was made now."""
    import boto3
    from botocore.exceptions import ClientError

    client = boto3.client(
        "s3",
        endpoint_url=values["SYNTH_S3_ENDPOINT_URL"],
        aws_access_key_id=values["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=values["AWS_SECRET_ACCESS_KEY"],
        region_name=values["AWS_DEFAULT_REGION"],
    )
    try:
        client.head_bucket(Bucket=BUCKET)
        return False
    except ClientError:
        client.create_bucket(Bucket=BUCKET)
        return True


def install_instance(layout: ProductionLayout, instance_file: Path) -> None:
    """The Docker deployment's instance file as the Dagster home's `dagster.yaml`."""
    layout.dagster_home.mkdir(parents=True, exist_ok=True)
    target = layout.dagster_home / "dagster.yaml"
    if not target.exists() or target.read_bytes() != instance_file.read_bytes():
        shutil.copyfile(instance_file, target)
