"""Serving the gateway: its configuration from the platform settings, uvicorn in front."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

import uvicorn

from gateway.app import create_app
from gateway.certificates import ServerCertificate, generated_certificate
from gateway.config import GatewayConfig
from proxy.listener_limits import ListenerLimits, limited_protocol
from synth_pipelines.config import Settings
from synth_pipelines.credentials import load_secret, load_signing_key
from synth_pipelines.runtime.admission import WorkerPool


def gateway_config(config: Settings) -> GatewayConfig:
    return GatewayConfig(
        database_url=config.control_database_url,
        key_secret=load_secret(config.gateway_secret_path),
        dagster_url=config.dagster_url,
        signing_key=load_signing_key(config.signing_key_path),
        proxy_url=config.proxy_url,
        objects_url=config.objects_url,
        s3_endpoint_url=config.s3_endpoint_url,
        dagster_home=config.dagster_home,
        teacher_service_url=config.teacher_service_url,
        model_registry=config.model_registry,
        work_dir=config.work_dir,
        model_service_url=config.model_backend_url,
        model_service_key=config.tinker_api_key,
        worker_pool=WorkerPool.configured(config),
    )


def listen_address(config: Settings, listen: str | None) -> tuple[str, int]:
    """`HOST:PORT` as given, else the host and port of `gateway_url`."""
    if listen is None:
        address = urlparse(config.gateway_url)
        return address.hostname or "127.0.0.1", address.port or 8300
    host, separator, port = listen.rpartition(":")
    if not separator or not port.isdigit() or not host:
        raise ValueError(f"--listen {listen!r} must be HOST:PORT, e.g. 0.0.0.0:8300")
    return host.strip("[]"), int(port)


def tls_files(config: Settings, host: str) -> ServerCertificate:
    """The certificate a gateway serving on `host` presents: the operator's when given
    (`SYNTH_GATEWAY_TLS_CERT` and `SYNTH_GATEWAY_TLS_KEY`), else the generated one."""
    if config.gateway_tls_cert is None and config.gateway_tls_key is None:
        return generated_certificate(config.gateway_tls_dir, host)
    if config.gateway_tls_cert is None or config.gateway_tls_key is None:
        raise ValueError("set both SYNTH_GATEWAY_TLS_CERT and SYNTH_GATEWAY_TLS_KEY, or neither")
    authority = config.gateway_ca or config.gateway_tls_cert
    return ServerCertificate(config.gateway_tls_cert, config.gateway_tls_key, authority)


def serve(config: Settings, listen: str | None = None) -> None:
    """Serve operators at `listen` (HOST:PORT) over HTTPS; without it, over plain HTTP at
    `gateway_url`'s address (loopback in the embedded default)."""
    host, port = listen_address(config, listen)
    tls = tls_files(config, host) if listen is not None else None
    limits = ListenerLimits()
    app = create_app(gateway_config(config))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            timeout_graceful_shutdown=5,
            http=limited_protocol(limits),
            timeout_keep_alive=limits.keep_alive_sec,
            ssl_certfile=None if tls is None else str(tls.certificate),
            ssl_keyfile=None if tls is None else str(tls.key),
        )
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, port), family=family) as listener:
        server.run(sockets=[listener])
