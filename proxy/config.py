"""What the capture proxy is built from: given by whoever starts it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from synth_pipelines.contracts.evidence_chunk import EvidenceChunk
from synth_pipelines.rendering.model_registry import ModelRegistry


@dataclass(frozen=True)
class ProxyConfig:
    state_dir: Path
    signing_key_path: Path
    database_url: str
    objects_url: str
    model_service_url: str | None
    model_service_key: str | None
    registry: ModelRegistry = field(default_factory=ModelRegistry)
    workers: int = 2
    generation_limit: int = 64
    count_limit: int = 16
    publish_interval_sec: float = 1.0
    evidence_settle_sec: float = 10.0
    """An attempt's staged calls are published once it has staged none for this long, so a
    chunk holds many turns of a conversation (a flush publishes everything at once)."""
    report_published: Callable[[EvidenceChunk], None] | None = None
    """Told of each published evidence chunk, on the publishing thread (the platform's
    lineage, given at the process edge); None: published chunks are not reported."""
    s3_endpoint_url: str | None = None
    backend_timeout_sec: float = 600.0
    """A model backend that completes no request for this long fails the calls waiting on
    it (a harness gives up on a call after about as long)."""
