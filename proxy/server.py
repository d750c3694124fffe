"""Serving the proxy: configuration from the platform settings, uvicorn in front."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from urllib.parse import urlparse

import uvicorn
from fastapi import FastAPI

from proxy.app import create_app
from proxy.config import ProxyConfig
from proxy.listener_limits import ListenerLimits, limited_protocol
from proxy.sandbox_listener import sandbox_socket
from synth_pipelines.config import Settings
from synth_pipelines.contracts.evidence_chunk import EvidenceChunk
from synth_pipelines.rendering.model_registry import configured_registry

DEFAULT_WORKERS = min(8, (os.cpu_count() or 1) + 1)
"""One worker more than cores: a worker waits on the model with the GIL free much of the time.
On 2 cores, 32 streaming sessions ran at 120-136 calls/s with 2, 3 or 4 workers alike, within
run-to-run noise (`benchmarks/proxy.py`)."""


def proxy_config(
    config: Settings,
    *,
    workers: int = DEFAULT_WORKERS,
    report_published: Callable[[EvidenceChunk], None] | None = None,
) -> ProxyConfig:
    registry = configured_registry(config)
    return ProxyConfig(
        state_dir=config.state_dir,
        signing_key_path=config.signing_key_path,
        database_url=config.control_database_url,
        objects_url=config.objects_url,
        s3_endpoint_url=config.s3_endpoint_url,
        model_service_url=config.model_backend_url,
        model_service_key=config.tinker_api_key,
        registry=registry,
        workers=workers,
        publish_interval_sec=config.proxy_publish_interval_sec,
        report_published=report_published,
    )


def server_config(app: FastAPI, limits: ListenerLimits) -> uvicorn.Config:
    """uvicorn's settings for the proxy: its listeners held to `limits`."""
    return uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=5,
        http=limited_protocol(limits),
        timeout_keep_alive=limits.keep_alive_sec,
    )


def serve(
    config: Settings,
    *,
    workers: int = DEFAULT_WORKERS,
    report_published: Callable[[EvidenceChunk], None] | None = None,
) -> None:
    """Serve operators at `proxy_url` and sandboxes at `proxy_sandbox_socket`, telling
    `report_published` of each published evidence chunk."""
    address = urlparse(config.proxy_url)
    operators = socket.create_server((address.hostname or "127.0.0.1", address.port or 8200))
    app = create_app(proxy_config(config, workers=workers, report_published=report_published))
    server = uvicorn.Server(server_config(app, ListenerLimits()))
    with operators, sandbox_socket(config.proxy_sandbox_socket) as sandboxes:
        server.run(sockets=[operators, sandboxes])
