"""Where the platform keeps its state, read from the environment at each process's edge.

Every process (CLI, Dagster run workers, proxy, model service) resolves the same
settings from the same variables, so a command run in another terminal sees the
state the daemon wrote. Defaults place everything under the project checkout so that
the embedded default needs no configuration at all.

A process reads them once, where it starts (`settings()`), and passes them down as
values: nothing below that edge reads the environment, so a test or a caller gives a
function exactly the settings it means.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from synth_pipelines import state_locations
from synth_pipelines.state_locations import find_project_root


def _host_cpus() -> int:
    return len(os.sched_getaffinity(0))


DAGSTER_UI_PATH = "/dagster"
"""The Dagster webserver's path prefix, and where the gateway serves its UI to admins."""
REGISTRY_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?")


def registry_hosts(value: object) -> object:
    """`image_registry_hosts` as a variable (or a Harbor `--ek`) spells it, comma-separated,
    as its items; each must be `host` or `host:port`."""
    if isinstance(value, str):
        value = tuple(item.strip() for item in value.split(",") if item.strip())
    if isinstance(value, (list, tuple)):
        for entry in value:
            if not isinstance(entry, str) or not REGISTRY_HOST.fullmatch(entry):
                raise ValueError(
                    f"registry host {entry!r} must be a host name, optionally with ':PORT' "
                    "(e.g. pypi.org or mirror.example.org:8443)"
                )
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SYNTH_", extra="ignore")

    project_root: Path = Field(default_factory=find_project_root)
    data_dir: Path | None = None
    database_url: str | None = None
    object_store_url: str | None = None
    s3_endpoint_url: str | None = None
    dagster_url: str = Field(
        default=f"http://127.0.0.1:3000{DAGSTER_UI_PATH}",
        description="The Dagster webserver as the platform's own processes reach it, on "
        f"loopback; its path is the webserver's path prefix, `{DAGSTER_UI_PATH}`, under "
        "which the gateway serves the UI to admins.",
    )
    proxy_url: str = "http://127.0.0.1:8200"
    gateway_url: str = Field(
        default=state_locations.DEFAULT_GATEWAY_URL,
        description="The gateway, the control plane operators reach the platform through.",
    )
    gateway_ca: Path | None = Field(
        default=None,
        description="The certificate authority the CLI checks an HTTPS gateway's "
        "certificate by: the file a gateway serving `--listen` generated, or the operator's.",
    )
    gateway_tls_cert: Path | None = Field(
        default=None,
        description="The operator's certificate (PEM, its chain after it) for a gateway "
        "serving `--listen`; unset: one generated for the state directory.",
    )
    gateway_tls_key: Path | None = Field(
        default=None, description="The private key of `SYNTH_GATEWAY_TLS_CERT` (PEM)."
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="The operator's gateway API key; unset: the local operator's key that "
        "the embedded default writes at its first `synth up` (`operator_key_path`).",
    )
    model_service_url: str = "http://127.0.0.1:8100"
    teacher_service_url: str = Field(
        default="http://127.0.0.1:8102",
        description="Where a scripted model service answers as a teacher (`synth model serve "
        "--scripted`), for runs that capture a harness's demonstrations.",
    )
    tinker_base_url: str | None = Field(
        default=None,
        validation_alias="TINKER_BASE_URL",
        description="The Tinker service to sample and train through, in place of the embedded "
        "model service (the tinker SDK's own variable).",
    )
    tinker_api_key: str = Field(
        default="tml-synth-local",
        validation_alias="TINKER_API_KEY",
        description="The key the tinker SDK presents (any 'tml-' key for the embedded service).",
    )
    base_model: str = Field(
        default="synth/qwen3-tiny",
        description="The base model the embedded model service loads at start (`synth up`); "
        "it serves every seeded model either way.",
    )
    model_registry: Path | None = None
    dagster_home_dir: str | None = Field(
        default=None,
        validation_alias="DAGSTER_HOME",
        description="The Dagster instance's home (Dagster's own variable); default: "
        "`dagster_home` in the project.",
    )
    image_cache_dir: Path | None = Field(
        default=None,
        description="Where the local image builder keeps bases and layers (default: "
        "`images` in the state directory); several state directories may share one.",
    )
    image_cache_mb: int = Field(
        default=30000,
        ge=0,
        description="The layer store's bound: least recently used layers no sandbox holds "
        "are pruned past it after each build.",
    )
    image_step_timeout_sec: float = Field(
        default=1800, gt=0, description="The longest one Dockerfile step may run."
    )
    debian_mirror: str = Field(
        default="http://deb.debian.org/debian",
        description="The Debian archive the image builder makes bases from (mmdebstrap).",
    )
    image_registry_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(
            "pypi.org",
            "files.pythonhosted.org",
            "deb.debian.org",
            "security.debian.org",
            "registry.npmjs.org",
        ),
        description="The package registries an image build's RUN steps may reach through "
        "the builder's proxy, comma-separated, each `host` (ports 80 and 443) or "
        "`host:port`; the Debian mirror's host is always added.",
    )
    proxy_publish_interval_sec: float = 1.0
    owner: str = "local"
    nightly_dataset: str | None = Field(
        default=None,
        description="The dataset version the nightly schedule evaluates the newest checkpoint "
        "on (`assets/schedules.py`), e.g. `synth/heldout@v1`.",
    )
    nightly_actor: str | None = Field(
        default=None, description="The published actor profile it evaluates, `org/name@version`."
    )
    nightly_plan: str = Field(
        default='{"kind": "eval", "attempts_per_task": 1}',
        description="The plan of its evaluations, as JSON.",
    )
    admission_pool: str = Field(
        default_factory=socket.gethostname,
        description="The worker pool whose budget every attempt is admitted against, "
        "across all runs; processes naming the same pool share one budget.",
    )
    pool_max_active_attempts: int = Field(
        default_factory=lambda: 4 * _host_cpus(),
        ge=1,
        description="Attempts the pool runs at once (default: 4 per CPU of this host).",
    )
    pool_cpus: float = Field(
        # A task's CPUs are a limit its sandbox is throttled at, not a reservation, and an
        # agent mostly waits on its model: the pool overcommits CPU as it does attempts.
        # (At the host's own count, a 2-core host ran at most two 1-CPU attempts at once
        # whatever the plan allowed.) Memory, which cannot be taken back, is not overcommitted.
        default_factory=lambda: float(4 * _host_cpus()),
        gt=0,
        description="CPU limits the pool's attempts may hold together (default: 4 per CPU "
        "of this host).",
    )
    pool_memory_mb: int = Field(
        default_factory=lambda: os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20,
        ge=64,
        description="Memory the pool's attempts may hold together (default: this host's).",
    )
    pool_storage_mb: int = Field(
        default_factory=lambda: shutil.disk_usage(find_project_root()).total >> 20,
        ge=64,
        description="Disk the pool's attempts may hold together (default: the size of the "
        "disk holding the checkout).",
    )
    pool_lease_ttl_sec: float = Field(
        default=60,
        gt=0,
        description="How long an admission lease outlives its holder's last renewal; the "
        "holder renews it every third of that.",
    )
    platform_retry_delay_sec: float = Field(
        default=10,
        ge=0,
        description="How long an attempt the platform failed waits before it runs again (times "
        "the retry's number): long enough for a restarting model service to come back.",
    )
    worker_lease_sec: float = Field(
        default=60,
        gt=0,
        description="How long a worker's claim of a batch outlives its last heartbeat; the "
        "worker beats every third of that, and a later claim may supersede it after.",
    )
    worker_engines: tuple[str, ...] | None = Field(
        default=None,
        description="Agent engines this host's run workers advertise when they claim a "
        "batch (default: every engine).",
    )
    worker_providers: tuple[str, ...] | None = Field(
        default=None,
        description="Sandbox providers this host's run workers advertise (default: the "
        "local sandbox and every Harbor provider).",
    )
    worker_judges: bool = Field(
        default=True, description="Whether this host's run workers advertise judge support."
    )

    @field_validator("image_registry_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        return registry_hosts(value)

    @property
    def model_backend_url(self) -> str:
        """Where sampling and training go: Tinker when configured, else the model service."""
        return self.tinker_base_url or self.model_service_url

    @property
    def state_dir(self) -> Path:
        return state_locations.state_dir(self.data_dir, self.project_root)

    @property
    def control_database_url(self) -> str:
        return state_locations.control_database_url(self.database_url, self.state_dir)

    @property
    def objects_url(self) -> str:
        return state_locations.objects_url(self.object_store_url, self.state_dir)

    @property
    def dagster_home(self) -> Path:
        return Path(self.dagster_home_dir or self.project_root / "dagster_home")

    @property
    def claude_code(self) -> Path:
        """The Claude Code CLI installed by the setup (`make setup`)."""
        return self.project_root / ".tools" / "claude-code" / "node_modules" / ".bin" / "claude"

    @property
    def signing_key_path(self) -> Path:
        return self.state_dir / "proxy-signing.key"

    @property
    def gateway_secret_path(self) -> Path:
        """The gateway's own secret, under which operators' keys are hashed."""
        return self.state_dir / "gateway-key.secret"

    @property
    def gateway_tls_dir(self) -> Path:
        """The gateway's generated certificate authority and server certificate."""
        return self.state_dir / "gateway-tls"

    @property
    def operator_key_path(self) -> Path:
        """The local operator's gateway key (an admin's), written at the first `synth up`."""
        return state_locations.operator_key_path(self.state_dir)

    @property
    def proxy_sandbox_socket(self) -> Path:
        """Where the capture proxy serves sandboxes (only the model routes), beside
        `proxy_url`, which operators use (`proxy/sandbox_listener.py`)."""
        return self.state_dir / "proxy-sandbox.sock"

    @property
    def dagster_code_socket(self) -> Path:
        """Where the embedded default's long-lived Dagster code server listens; the daemon
        and the webserver both connect to it (`services/embedded.py`)."""
        return self.state_dir / "dagster-code.sock"

    @property
    def work_dir(self) -> Path:
        """Scratch space for trial directories and sandboxes; never authoritative."""
        return self.state_dir / "work"

    @property
    def images_dir(self) -> Path:
        """Bases and layers of the local image builder (`sandbox/image_build.py`)."""
        return (self.image_cache_dir or self.state_dir / "images").resolve()

    @property
    def sandboxes_dir(self) -> Path:
        """One directory per local sandbox (`sandbox/bwrap.py`), with its lease."""
        return self.work_dir / "sandboxes"


def settings() -> Settings:
    """The settings as the environment holds them now: called once by each process's edge
    (a CLI command's group, a service's start, the Dagster definitions), never below it."""
    return Settings()
