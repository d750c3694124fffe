"""The embedded platform on free ports in a fresh state directory, model service scripted.

The same services `synth up` starts (model service, capture proxy, gateway, Dagster code
server, daemon and webserver), by the same supervisor, with the local operator's gateway key
written as `synth up` writes it, except that the model service runs `--scripted` so each call
costs what the benchmark scripts and not a forward pass.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import httpx

from benchmarks.proxy_processes import free_port
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine, create_tables, engine_for
from synth_pipelines.credentials import load_secret
from synth_pipelines.sandbox.leases import reclaim_orphans
from synth_pipelines.sandbox.limits import detect_hierarchy
from synth_pipelines.services.embedded import embedded_services, write_code_server_workspace
from synth_pipelines.services.operator_key import ensure_operator_key
from synth_pipelines.services.supervisor import Service, running_pid, start, stop


def platform_environment(root: Path) -> dict[str, str]:
    """Settings for a platform whose state lives under `root`, its services on free ports."""
    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    project = Settings().project_root
    shutil.copy(project / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return {
        "SYNTH_DATA_DIR": str(root / "state"),
        "DAGSTER_HOME": str(home),
        "SYNTH_DAGSTER_URL": f"http://127.0.0.1:{free_port()}",
        "SYNTH_PROXY_URL": f"http://127.0.0.1:{free_port()}",
        "SYNTH_MODEL_SERVICE_URL": f"http://127.0.0.1:{free_port()}",
        "SYNTH_GATEWAY_URL": f"http://127.0.0.1:{free_port()}",
        "TINKER_TELEMETRY": "0",
    }


def _scripted(service: Service) -> Service:
    if service.name != "model-service":
        return service
    return Service(
        service.name,
        [*service.argv, "--scripted"],
        service.health_url,
        service.address,
        service.env,
        service.ready_timeout_sec,
    )


@dataclass
class Platform:
    config: Settings
    services: list[Service]
    pids: dict[str, int]

    def set_script(self, entries: list[dict[str, Any]]) -> None:
        httpx.put(
            f"{self.config.model_service_url}/scripted/v1/script",
            json={"entries": entries},
            headers={"X-API-Key": self.config.tinker_api_key},
            timeout=30,
        ).raise_for_status()

    def operator_key(self) -> str:
        """The local operator's gateway key, as every `synth` command of this state finds it."""
        return self.config.operator_key_path.read_text().strip()

    def stop(self) -> None:
        for service in reversed(self.services):
            stop(self.config.state_dir, service)


def start_platform(root: Path) -> Platform:
    """Point this process's settings at a new platform under `root` and start it."""
    os.environ.update(platform_environment(root))
    engine_for.cache_clear()
    config = Settings()
    # A fresh Dagster home's SQLite storage is created by whichever process opens it first;
    # the daemon and webserver starting together can both stamp its schema (two alembic
    # heads), after which no process loads the code location. Create it here, once.
    dg.DagsterInstance.get().dispose()
    write_code_server_workspace(config)
    engine = control_engine(config)
    create_tables(engine)
    ensure_operator_key(
        engine, load_secret(config.gateway_secret_path), config.operator_key_path, config.owner
    )
    services = [_scripted(service) for service in embedded_services(config)]
    platform = Platform(config, services, {})
    try:
        for service in services:
            platform.pids[service.name] = start(config.state_dir, service, cwd=config.project_root)[
                0
            ]
    except BaseException:
        platform.stop()
        raise
    return platform


def alive(platform: Platform) -> list[str]:
    """The services that still run."""
    return [
        service.name
        for service in platform.services
        if running_pid(platform.config.state_dir, service) is not None
    ]


def tear_down(platform: Platform | None, root: Path, *, keep: bool) -> None:
    """Stop the services, release what stopped run workers left, and remove `root`
    unless it is to be kept."""
    if platform is not None:
        platform.stop()
    # Run workers stopped mid-batch leave their sandboxes' filesystems mounted.
    reclaim_orphans(Settings().sandboxes_dir, detect_hierarchy())
    if keep:
        print(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
