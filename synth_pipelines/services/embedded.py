"""The embedded default's services: model service, capture proxy, gateway, Dagster code
server, daemon and UI.

The daemon and the webserver reach the definitions through one long-lived code server on a
Unix socket in the state directory. Left to load `workspace.yaml`'s Python module, the daemon
would spawn its own code server and replace it every minute (Dagster refreshes a daemon's
workspace that often), and each replacement imports the definitions again: about 5 CPU-seconds
a minute, a tenth of a core on a 2-core machine, for nothing.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

from synth_pipelines.config import Settings
from synth_pipelines.services.supervisor import Service

MODEL_SERVICE = "model-service"
GATEWAY = "gateway"
CODE_LOCATION = "synth_pipelines"


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _workspace(config: Settings) -> Path:
    return config.state_dir / "dagster-workspace.yaml"


def write_code_server_workspace(config: Settings) -> None:
    """Write the workspace that points the daemon and the webserver at the code server
    (JSON is YAML, so no YAML writer is needed)."""
    path = _workspace(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    target = {"socket": str(config.dagster_code_socket), "location_name": CODE_LOCATION}
    path.write_text(json.dumps({"load_from": [{"grpc_server": target}]}, indent=2) + "\n")


def gateway_service(config: Settings, listen: str | None = None) -> Service:
    """The gateway: on `gateway_url` over HTTP, or on `listen` (HOST:PORT) over HTTPS,
    its health checked over loopback against the authority of its certificate."""
    argv = [_bin("synth"), "gateway", "serve"]
    if listen is None:
        return Service(
            name=GATEWAY,
            argv=argv,
            health_url=f"{config.gateway_url}/health",
            address=config.gateway_url,
        )
    host, _, port = listen.rpartition(":")
    local = "127.0.0.1" if host.strip("[]") in ("0.0.0.0", "::", "") else host
    authority = (
        config.gateway_ca
        if config.gateway_tls_cert is not None
        else config.gateway_tls_dir / "ca.pem"
    )
    return Service(
        name=GATEWAY,
        argv=[*argv, "--listen", listen],
        health_url=f"https://{local}:{port}/health",
        address=f"https://{host}:{port}",
        ca_file=authority,
    )


def embedded_services(config: Settings, listen: str | None = None) -> list[Service]:
    dagster = urlparse(config.dagster_url)
    model = urlparse(config.model_service_url)
    env = {"DAGSTER_HOME": str(config.dagster_home), "TINKER_TELEMETRY": "0"}
    workspace = str(_workspace(config))
    synth = _bin("synth")
    return [
        Service(
            name=MODEL_SERVICE,
            argv=[
                synth,
                "model",
                "serve",
                "--base-model",
                config.base_model,
                "--host",
                model.hostname or "127.0.0.1",
                "--port",
                str(model.port or 8100),
            ],
            health_url=f"{config.model_service_url}/api/v1/healthz",
            address=config.model_service_url,
            env=env,
        ),
        Service(
            name="capture-proxy",
            argv=[synth, "proxy", "serve"],
            health_url=f"{config.proxy_url}/health",
            address=config.proxy_url,
            env={**env, "TINKER_BASE_URL": config.model_service_url},
        ),
        replace(gateway_service(config, listen), env=env),
        Service(
            name="dagster-code-server",
            argv=[
                _bin("dagster"),
                "api",
                "grpc",
                "--module-name",
                "synth_pipelines.definitions",
                "--attribute",
                "defs",
                "--socket",
                str(config.dagster_code_socket),
                "--location-name",
                CODE_LOCATION,
            ],
            # The server binds its socket only once the definitions have loaded.
            health_url=f"unix://{config.dagster_code_socket}",
            address=f"unix://{config.dagster_code_socket}",
            env=env,
        ),
        Service(
            name="dagster-daemon",
            argv=[_bin("dagster-daemon"), "run", "-w", workspace],
            health_url=None,
            address="(background)",
            env=env,
        ),
        Service(
            name="dagster-webserver",
            argv=[
                _bin("dagster-webserver"),
                "-w",
                workspace,
                "-h",
                dagster.hostname or "127.0.0.1",
                "-p",
                str(dagster.port or 3000),
                # Its path is the one the gateway serves the UI at, so the pages' own links
                # and the GraphQL endpoint resolve there.
                *(["--path-prefix", dagster.path.rstrip("/")] if dagster.path.strip("/") else []),
            ],
            health_url=f"{config.dagster_url}/server_info",
            address=config.dagster_url,
            env=env,
        ),
    ]
