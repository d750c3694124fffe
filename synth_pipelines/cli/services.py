"""`synth up` / `synth down`: the embedded default's background services, or with
`--production` the production-shaped deployment on this host (`services/production.py`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from synth_pipelines.cli.output import (
    JSON_OPTION,
    console,
    emit,
    errors,
    fail,
    folding_table,
    user_errors,
)
from synth_pipelines.config import DAGSTER_UI_PATH, Settings, settings
from synth_pipelines.state_locations import keep_private

if TYPE_CHECKING:
    from synth_pipelines.services.supervisor import Service

services_app = typer.Typer()

LISTEN_OPTION = typer.Option(
    None,
    "--listen",
    help="Serve the gateway on HOST:PORT over HTTPS (for operators on other machines); "
    "default: SYNTH_GATEWAY_URL, on loopback, over HTTP.",
)
PRODUCTION_OPTION = typer.Option(
    False,
    "--production",
    help="The production-shaped deployment: PostgreSQL, an S3-compatible server, the "
    "services, and every Dagster run in a container of the project's image.",
)


def _started_row(config: Settings, service: Service, pid: int, started: bool) -> dict[str, Any]:
    from synth_pipelines.runtime.served_models import model_service_capabilities
    from synth_pipelines.services.embedded import GATEWAY, MODEL_SERVICE
    from synth_pipelines.services.supervisor import log_file

    return {
        "service": service.name,
        "pid": pid,
        "started": started,
        "address": service.address,
        "log": str(log_file(config.state_dir, service.name)),
        "models": list(model_service_capabilities(service.address, config.tinker_api_key))
        if service.name == MODEL_SERVICE
        else None,
        "api_key_file": str(config.operator_key_path) if service.name == GATEWAY else None,
        "ca_file": str(service.ca_file) if service.ca_file is not None else None,
        "ui_url": f"{service.address}{DAGSTER_UI_PATH}/" if service.name == GATEWAY else None,
    }


def _ensure_operator_key(config: Settings) -> None:
    """The local operator's admin key for the gateway, in `operator_key_path`."""
    from synth_pipelines.control.database import control_engine, create_tables
    from synth_pipelines.credentials import load_secret
    from synth_pipelines.services.operator_key import ensure_operator_key

    engine = control_engine(config)
    create_tables(engine)
    ensure_operator_key(
        engine, load_secret(config.gateway_secret_path), config.operator_key_path, config.owner
    )


RUNS_NAMED = 5
"""Active runs named when `synth up` refuses to restart a service under them."""


def _refuse_under_running_work(config: Settings, changed: list[str]) -> None:
    """Exit 2 if any run is active: restarting a service it samples or trains through
    (the model service's sessions, the proxy's, the daemon's launches) would end its work."""
    from synth_pipelines.control.database import control_engine
    from synth_pipelines.control.runs import active_runs

    active = active_runs(control_engine(config))
    if not active:
        return
    shown = ", ".join(run.run_id for run in active[:RUNS_NAMED])
    more = f" and {len(active) - RUNS_NAMED} more" if len(active) > RUNS_NAMED else ""
    fail(
        f"{', '.join(changed)} would restart with another configuration under "
        f"{len(active)} active run(s) ({shown}{more}), ending their work; nothing was "
        "restarted: let them finish or cancel them (`synth run cancel RUN`), then run "
        "`synth up` again"
    )


def _start_all(
    config: Settings, services: list[Service], say: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    from synth_pipelines.services.supervisor import (
        ServiceBusyError,
        ServiceStartError,
        reconfigured,
        start,
    )

    changed = [service.name for service in services if reconfigured(config.state_dir, service)]
    if changed:
        _refuse_under_running_work(config, changed)
    rows = []
    for service in services:
        try:
            pid, started = start(config.state_dir, service, cwd=config.project_root)
        except ServiceBusyError as error:
            fail(str(error))
        except ServiceStartError as error:
            fail(str(error), code=1)
        if say is not None:
            say(f"{service.name}: {'started' if started else 'already running'}")
        rows.append(_started_row(config, service, pid, started))
    return rows


def _services_table(rows: list[dict[str, Any]]) -> None:
    table = folding_table("service", "state", "address", "log")
    for row in rows:
        state = "started" if row["started"] else "already running"
        table.add_row(row["service"], state, row["address"], row["log"])
    console.print(table)
    for row in rows:
        if row["models"] is not None:
            console.print(f"the model service serves {', '.join(row['models'])}")
        if row["api_key_file"] is not None:
            console.print(
                f"the gateway is at {row['address']}; your API key is in {row['api_key_file']}"
                + (
                    f"; its certificate authority is {row['ca_file']} (SYNTH_GATEWAY_CA)"
                    if row["ca_file"]
                    else ""
                ),
                highlight=False,
                soft_wrap=True,
            )
            console.print(
                f"the Dagster UI is at {row['ui_url']} for admins' keys: `synth ui` signs a "
                "browser in",
                highlight=False,
                soft_wrap=True,
            )


@services_app.command("up")
def up(
    ctx: typer.Context,
    production: bool = PRODUCTION_OPTION,
    listen: str | None = LISTEN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Start the embedded services unless they run: model service, proxy, gateway, Dagster
    code server, daemon and UI (--production: the production-shaped deployment)."""
    from gateway.server import listen_address

    config: Settings = ctx.obj
    if listen is not None:
        try:
            listen_address(config, listen)
        except ValueError as error:
            fail(str(error))
    if production:
        _up_production(config, listen, as_json)
        return
    from resources.dagster_instance import create_dagster_storage
    from synth_pipelines.services.embedded import embedded_services, write_code_server_workspace

    # The Dagster home holds Dagster's storage (runs, their configuration, event and
    # compute logs): its owner's alone, as the state directory is.
    keep_private(config.dagster_home)
    create_dagster_storage(str(config.dagster_home))
    write_code_server_workspace(config)
    _ensure_operator_key(config)
    rows = _start_all(config, embedded_services(config, listen))
    emit("up", rows, as_json, lambda: _services_table(rows))


def _production_services(
    config: Settings, values: dict[str, str], listen: str | None = None
) -> list[Service]:
    """The deployment's services after its database and bucket: the model service (unless
    a Tinker service is named), the proxy, the code server, the daemon, the webserver."""
    from synth_pipelines.services import production
    from synth_pipelines.services.embedded import MODEL_SERVICE, embedded_services

    local = production.local_servers(values)
    return [
        service
        for service in embedded_services(config, listen)
        if service.name != MODEL_SERVICE or MODEL_SERVICE in local
    ]


def _production_settings(values: dict[str, str]) -> Settings:
    """This process configured as the deployment's processes are: the services it starts
    inherit its environment, and it reads the settings again from it."""
    os.environ.update(values)
    return settings()


def _up_production(operator: Settings, listen: str | None, as_json: bool) -> None:
    from resources.dagster_instance import create_dagster_storage
    from synth_pipelines.sandbox.errors import SandboxStartError
    from synth_pipelines.services import production
    from synth_pipelines.services.dockerd import DockerDaemon, DockerDaemonError
    from synth_pipelines.services.embedded import write_code_server_workspace
    from synth_pipelines.services.project_image import ProjectImageError, build_project_image

    def say(line: str) -> None:
        errors.print(f"[dim]{line}[/]", highlight=False, soft_wrap=True)

    began = time.monotonic()
    layout = production.ProductionLayout.under(operator.state_dir)
    with user_errors(
        ProjectImageError, DockerDaemonError, SandboxStartError, production.ProductionError
    ):
        engine = DockerDaemon.of(operator.images_dir, operator.project_root)
        engine.ensure()
        image = build_project_image(
            engine,
            say,
            images_dir=operator.images_dir,
            debian_mirror=operator.debian_mirror,
            project_root=operator.project_root,
        )
        values = production.deployment_environment(
            layout,
            os.environ,
            {
                "SYNTH_PROJECT_IMAGE": image.tag,
                "DOCKER_HOST": engine.host,
                "DOCKER_CONFIG": str(engine.client_config),
            },
            operator.pool_max_active_attempts,
        )
        config = _production_settings(values)
        production.let_postgres_pass(layout, values)
        if production.initialize_postgres(layout, values):
            say(f"database cluster made in {layout.postgres_data}")
        rows = _start_all(config, production.server_services(layout, values), say)
        made = production.create_databases(values)
        if made:
            say(f"databases made: {', '.join(made)}")
        if production.create_bucket(values):
            say(f"bucket made: {production.BUCKET}")
        production.install_instance(
            layout, operator.project_root / "dagster_home" / "dagster.docker.yaml"
        )
        create_dagster_storage(str(layout.dagster_home))
        write_code_server_workspace(config)
        _ensure_operator_key(config)
        rows += _start_all(config, _production_services(config, values, listen), say)
    document = {
        "env_file": str(layout.env_file),
        "image": image.tag,
        "docker_host": engine.host,
        "dagster_url": next(row["ui_url"] for row in rows if row["ui_url"] is not None),
        "seconds": round(time.monotonic() - began, 1),
        "services": rows,
    }

    def render() -> None:
        _services_table(rows)
        console.print(f"every Dagster run in a container of {image.tag}")
        console.print(f"Dagster UI (admins, `synth ui`): {document['dagster_url']}")
        console.print(f"use it: set -a; . {layout.env_file}; set +a")

    emit("up --production", document, as_json, render)


@services_app.command("down")
def down(
    ctx: typer.Context, production: bool = PRODUCTION_OPTION, as_json: bool = JSON_OPTION
) -> None:
    """Stop the embedded services (--production: the production-shaped deployment, whose
    data stays for the next `synth up --production`)."""
    from synth_pipelines.services.embedded import embedded_services
    from synth_pipelines.services.supervisor import ServiceBusyError, stop

    config: Settings = ctx.obj
    if production:
        from synth_pipelines.services.production import (
            ProductionLayout,
            read_env_file,
            server_services,
        )

        layout = ProductionLayout.under(config.state_dir)
        if not layout.env_file.exists():
            fail(f"no production deployment in {layout.root}")
        values = read_env_file(layout.env_file)
        config = _production_settings(values)
        services = [*server_services(layout, values), *_production_services(config, values)]
    else:
        services = embedded_services(config)
    with user_errors(ServiceBusyError):
        rows = [
            {"service": service.name, "stopped": stop(config.state_dir, service)}
            for service in reversed(services)
        ]

    def render() -> None:
        for row in rows:
            console.print(f"{row['service']}: {'stopped' if row['stopped'] else 'not running'}")

    emit("down --production" if production else "down", rows, as_json, render)
