"""What the gateway is built from: given by whoever starts it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from synth_pipelines.runtime.admission import WorkerPool

MAX_BODY_BYTES = 1 << 20
"""A control request's largest body: bulk data (task packages, exports) never passes
through the gateway, so no request needs more."""


@dataclass(frozen=True)
class GatewayConfig:
    database_url: str
    key_secret: bytes
    """The secret operators' keys are hashed under (`control/operator_keys.py`)."""
    dagster_url: str
    signing_key: bytes
    """The platform's token signing key: the gateway mints operators' session tokens."""
    proxy_url: str
    """The capture proxy sessions sample through, as operators reach it."""
    worker_pool: WorkerPool
    """The deployment's worker pool, whose budget and leases `GET /v1/pool` shows."""
    objects_url: str
    """The object store runs' evidence is in (`storage/objectstore.py`)."""
    s3_endpoint_url: str | None
    model_service_url: str
    """The model service runs sample through: asked whether a run's model is served."""
    model_service_key: str
    dagster_home: Path
    """The Dagster instance a published dataset version is reported to."""
    teacher_service_url: str
    model_registry: Path | None
    """With the teacher's URL, the models the capture proxy serves (`served_registry`),
    as `GET /v1/models` lists them."""
    work_dir: Path
    """Scratch space: a regrade's tasks are materialized here to be checked first."""
    max_body_bytes: int = MAX_BODY_BYTES
    upload_grant_sec: int = 900
    """How long an upload grant may be used, to upload and to commit."""
    read_grant_sec: int = 300
    """How long a read grant may be used: long enough to start the download it is for."""
    event_poll_sec: float = 0.2
    """How often a followed run's new events are looked for."""
    results_gather_sec: float = 0.1
    """How long a poll of a run's results waits for others to share its read, once the
    run is polled `results_hot_polls` times a second (`shared_reads.py`)."""
    results_hot_polls: int = 10
    keepalive_sec: float = 15.0
    """How long a followed run's stream may stay silent before a comment keeps it open."""
    ui_login_ttl_sec: float = 60.0
    """How long a Dagster UI login link (`POST /v1/ui-sessions`) may be used, once."""
    ui_session_ttl_sec: float = 12 * 3600.0
    """How long the UI session it starts lasts, while its key stands."""
