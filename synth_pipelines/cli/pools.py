"""`synth pool show`: the worker pool's budget, what is held of it and who waits for it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from rich.table import Table

from synth_pipelines.cli.output import JSON_OPTION, console, emit, folding_table
from synth_pipelines.config import Settings
from synth_pipelines.contracts.admission_lease import Lease
from synth_pipelines.control.admission_leases import PoolUse, pool_leases
from synth_pipelines.control.database import control_engine
from synth_pipelines.runtime.admission import WorkerPool

pool_app = typer.Typer(
    help="The worker pool every run's attempts are admitted against: its budget and leases.",
    no_args_is_help=True,
)


def _leases_table(title: str, leases: list[Lease], now: datetime) -> Table:
    table = folding_table("holder", "run / attempt", "cpus", "memory MB", "storage MB", "expires")
    table.title = title
    for lease in leases:
        table.add_row(
            lease.holder,
            f"{lease.run_id or '-'} / {lease.attempt_id or '-'}",
            f"{lease.cpus:g}",
            str(lease.memory_mb),
            str(lease.storage_mb),
            lease.expires_at.isoformat() + (" (expired)" if lease.expires_at < now else ""),
        )
    return table


@pool_app.command("show")
def show(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """The pool's limits and use, its held leases and the requests waiting, oldest first
    (the pool is `SYNTH_ADMISSION_POOL`, by default this host's name)."""
    config: Settings = ctx.obj
    pool = WorkerPool.configured(config)
    pool_name = pool.name
    leases = pool_leases(control_engine(config), pool_name)
    now = datetime.now(UTC)
    held = [lease for lease in leases if lease.state == "held"]
    waiting = [lease for lease in leases if lease.state == "waiting"]
    use = PoolUse.of(held)

    def render() -> None:
        limits = pool.limits
        console.print(f"[bold]pool {pool_name}[/]", soft_wrap=True)
        console.print(
            f"attempts: {use.active} of {limits.max_active_attempts}\n"
            f"cpus: {use.cpus:g} of {limits.cpus:g}\n"
            f"memory MB: {use.memory_mb} of {limits.memory_mb}\n"
            f"storage MB: {use.storage_mb} of {limits.storage_mb}"
        )
        console.print(_leases_table("held", held, now))
        console.print(_leases_table("waiting", waiting, now))

    def lease_document(lease: Lease) -> dict[str, Any]:
        return {**lease.model_dump(), "expired": lease.expires_at < now}

    emit(
        "pool show",
        {
            "pool": pool_name,
            "limits": pool.limits,
            "use": {
                "active_attempts": use.active,
                "cpus": use.cpus,
                "memory_mb": use.memory_mb,
                "storage_mb": use.storage_mb,
            },
            "held": [lease_document(lease) for lease in held],
            "waiting": [lease_document(lease) for lease in waiting],
        },
        as_json,
        render,
    )
