"""`synth gateway serve`: the control plane operators reach the platform through."""

from __future__ import annotations

import typer

from synth_pipelines.cli.output import fail
from synth_pipelines.config import Settings

gateway_app = typer.Typer(
    help="The gateway operators reach the platform through.", no_args_is_help=True
)


@gateway_app.command("serve")
def serve(
    ctx: typer.Context,
    listen: str | None = typer.Option(
        None, "--listen", help="HOST:PORT to serve on; default: SYNTH_GATEWAY_URL's address."
    ),
) -> None:
    """Serve the gateway until interrupted: over HTTPS on --listen (the operator's
    certificate, SYNTH_GATEWAY_TLS_CERT/KEY, or one generated for the state directory),
    else over HTTP on SYNTH_GATEWAY_URL's loopback address."""
    from gateway.server import listen_address, tls_files
    from gateway.server import serve as run
    from synth_pipelines.control.database import control_engine, create_tables

    config: Settings = ctx.obj
    try:
        host, _ = listen_address(config, listen)
        if listen is not None:
            tls_files(config, host)
    except ValueError as error:
        fail(str(error))
    # Opened here, before serving: a database that refuses these credentials is one line
    # at start, not a failure on every operator's request.
    create_tables(control_engine(config))
    run(config, listen)
