"""`synth pool show`: the worker pool's budget, what is held of it and who waits for it,
and each organization's limits and line, as the gateway answers them."""

from __future__ import annotations

import typer
from rich.table import Table

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, folding_table, user_errors
from synth_pipelines.config import Settings
from synth_pipelines.contracts.pool import LeaseView, OrgAdmission, PoolDocument

pool_app = typer.Typer(
    help="The worker pool every run's attempts are admitted against: its budget and leases.",
    no_args_is_help=True,
)


def _leases_table(title: str, leases: list[LeaseView]) -> Table:
    table = folding_table(
        "holder", "org", "run / attempt", "cpus", "memory MB", "storage MB", "expires"
    )
    table.title = title
    for lease in leases:
        table.add_row(
            lease.holder,
            lease.org or "-",
            f"{lease.run_id or '-'} / {lease.attempt_id or '-'}",
            f"{lease.cpus:g}",
            str(lease.memory_mb),
            str(lease.storage_mb),
            lease.expires_at.isoformat() + (" (expired)" if lease.expired else ""),
        )
    return table


def _of(used: int, limit: int | None) -> str:
    return f"{used} of {'unlimited' if limit is None else limit}"


def _orgs_table(orgs: list[OrgAdmission]) -> Table:
    table = folding_table("org", "runs", "attempts", "waiting attempts", "queued runs")
    table.title = "organizations"
    for org in orgs:
        table.add_row(
            org.limits.org,
            _of(len(org.running_runs), org.limits.max_concurrent_runs),
            _of(org.active_attempts, org.limits.max_active_attempts),
            str(org.waiting_attempts),
            " ".join(org.queued_runs) or "-",
        )
    return table


@pool_app.command("show")
def show(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """The pool's limits and use, its held leases and the requests waiting, oldest first,
    and per organization its limits, what it holds and its queued runs (the pool is the
    gateway deployment's `SYNTH_ADMISSION_POOL`)."""
    config: Settings = ctx.obj
    with user_errors():
        shown = PoolDocument.model_validate(GatewayClient(config).request("GET", "/v1/pool"))

    def render() -> None:
        limits, use = shown.limits, shown.use
        console.print(f"[bold]pool {shown.pool}[/]", soft_wrap=True)
        console.print(
            f"attempts: {use.active_attempts} of {limits.max_active_attempts}\n"
            f"cpus: {use.cpus:g} of {limits.cpus:g}\n"
            f"memory MB: {use.memory_mb} of {limits.memory_mb}\n"
            f"storage MB: {use.storage_mb} of {limits.storage_mb}"
        )
        console.print(_leases_table("held", shown.held))
        console.print(_leases_table("waiting", shown.waiting))
        console.print(_orgs_table(shown.orgs))

    emit("pool show", shown, as_json, render)
