"""The embedded default's services: Dagster webserver and daemon (more join later)."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse

from synth_pipelines.config import Settings
from synth_pipelines.services.supervisor import Service


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def embedded_services(config: Settings) -> list[Service]:
    dagster = urlparse(config.dagster_url)
    env = {"DAGSTER_HOME": str(config.dagster_home)}
    workspace = str(config.project_root / "workspace.yaml")
    return [
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
