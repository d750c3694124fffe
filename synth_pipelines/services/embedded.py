"""The embedded default's services: model service, capture proxy, Dagster daemon and UI."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse

from synth_pipelines.config import Settings
from synth_pipelines.services.supervisor import Service

MODEL_SERVICE = "model-service"


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def embedded_services(config: Settings) -> list[Service]:
    dagster = urlparse(config.dagster_url)
    model = urlparse(config.model_service_url)
    env = {"DAGSTER_HOME": str(config.dagster_home), "TINKER_TELEMETRY": "0"}
    workspace = str(config.project_root / "workspace.yaml")
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
            ],
            health_url=f"{config.dagster_url}/server_info",
            address=config.dagster_url,
            env=env,
        ),
    ]
