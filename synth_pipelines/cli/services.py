"""`synth up` / `synth down`: the embedded default's background services."""

from __future__ import annotations

import typer
from rich.table import Table

from synth_pipelines.cli.output import JSON_OPTION, console, emit, fail
from synth_pipelines.config import settings

services_app = typer.Typer()


@services_app.command("up")
def up(as_json: bool = JSON_OPTION) -> None:
    """Start the embedded services unless they run: model service, proxy, Dagster code server,
    daemon and UI."""
    from resources.dagster_instance import create_dagster_storage
    from synth_pipelines.runtime.served_models import model_service_capabilities
    from synth_pipelines.services.embedded import (
        MODEL_SERVICE,
        embedded_services,
        write_code_server_workspace,
    )
    from synth_pipelines.services.supervisor import ServiceStartError, log_file, start

    config = settings()
    config.dagster_home.mkdir(parents=True, exist_ok=True)
    create_dagster_storage(str(config.dagster_home))
    write_code_server_workspace(config)
    rows = []
    for service in embedded_services(config):
        try:
            pid, started = start(config.state_dir, service, cwd=config.project_root)
        except ServiceStartError as error:
            fail(str(error), code=1)
        rows.append(
            {
                "service": service.name,
                "pid": pid,
                "started": started,
                "address": service.address,
                "log": str(log_file(config.state_dir, service.name)),
                "models": list(model_service_capabilities(service.address, config.tinker_api_key))
                if service.name == MODEL_SERVICE
                else None,
            }
        )

    def render() -> None:
        table = Table("service", "state", "address", "log")
        for row in rows:
            state = "started" if row["started"] else "already running"
            table.add_row(row["service"], state, row["address"], row["log"])
        console.print(table)
        for row in rows:
            if row["models"] is not None:
                console.print(f"the model service serves {', '.join(row['models'])}")

    emit("up", rows, as_json, render)


@services_app.command("down")
def down(as_json: bool = JSON_OPTION) -> None:
    """Stop the embedded services."""
    from synth_pipelines.services.embedded import embedded_services
    from synth_pipelines.services.supervisor import stop

    config = settings()
    rows = [
        {"service": service.name, "stopped": stop(config.state_dir, service)}
        for service in reversed(embedded_services(config))
    ]
    emit(
        "down",
        rows,
        as_json,
        lambda: [
            console.print(f"{r['service']}: {'stopped' if r['stopped'] else 'not running'}")
            for r in rows
        ],
    )
