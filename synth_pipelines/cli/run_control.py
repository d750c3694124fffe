"""`synth run checkpoints|workers|resume|cancel|regrade`: steering a run after it was
accepted."""

from __future__ import annotations

import time

import typer

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import (
    JSON_OPTION,
    console,
    emit,
    errors,
    folding_table,
    inert,
    user_errors,
)
from synth_pipelines.cli.runs import EXIT_INTERRUPTED, my_run, profile_argument, run_app


@run_app.command("checkpoints")
def checkpoints(
    ctx: typer.Context, run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION
) -> None:
    """The checkpoints a training run committed, one per batch, with their lineage; only
    the run's owner may see them."""
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    with user_errors():
        found = client.request("GET", f"/v1/runs/{run_id}/checkpoints")

    def render() -> None:
        table = folding_table("batch", "sampler (use with --model)", "optimizer steps", "cursor")
        for checkpoint in found:
            table.add_row(
                checkpoint["batch"],
                checkpoint["sampler_path"],
                str(checkpoint["optimizer_steps"]),
                str(checkpoint["dataset_cursor"]),
            )
        console.print(table)

    emit("run checkpoints", found, as_json, render)


@run_app.command("workers")
def workers(
    ctx: typer.Context, run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION
) -> None:
    """Every claim of the run's batches by a run worker: who held each batch, under which
    attempt number, and how the claim ended; only the run's owner may see them."""
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    with user_errors():
        found = client.request("GET", f"/v1/runs/{run_id}/workers")

    def render() -> None:
        table = folding_table("worker attempt", "worker", "status", "ended", "why")
        for attempt in found:
            # A failed claim's reason quotes the error that ended it, which can carry
            # text a task chose.
            table.add_row(
                attempt["worker_attempt_id"],
                inert(attempt["worker"]),
                attempt["status"],
                attempt["ended_at"] or f"lease to {attempt['lease_expires_at']}",
                inert(attempt["end_reason"] or ""),
            )
        console.print(table)

    emit("run workers", found, as_json, render)


@run_app.command("resume")
def resume(
    ctx: typer.Context, run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION
) -> None:
    """Relaunch an interrupted run from its unfinished batch (never past an unresolved update)."""
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    with user_errors():
        resumed = client.request("POST", f"/v1/runs/{run_id}/resume")
    emit(
        "run resume",
        resumed,
        as_json,
        lambda: console.print(
            f"resuming {run_id} at batch {resumed['resumed_batch']}; the batch gate relaunches it"
        ),
    )


@run_app.command("cancel")
def cancel(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    reason: str = typer.Option("cancelled by the operator", "--reason"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop a run: no further batch is admitted; in-flight batch runs are terminated."""
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    with user_errors():
        done = client.request("POST", f"/v1/runs/{run_id}/cancel", json={"reason": reason})
    status, terminated = done["status"], done["terminated"]
    if unstopped := done["termination_error"]:
        errors.print(
            f"warning: its batches' Dagster runs were not asked to stop: {unstopped}",
            highlight=False,
            soft_wrap=True,
        )
    emit(
        "run cancel",
        done,
        as_json,
        lambda: console.print(
            f"{run_id} "
            + ("cancelled" if done["cancelled"] else f"not cancelled: it is already {status}")
            + (f"; terminated {len(terminated)} Dagster run(s)" if terminated else "")
        ),
    )


@run_app.command("regrade")
def regrade(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    judge: str | None = typer.Option(
        None,
        "--judge",
        help="Judge profile (@file, inline JSON or org/name@version); "
        "without it the tasks' own verifiers assess the retained work again.",
    ),
    wait: bool = typer.Option(
        False,
        "--wait",
        help="Wait until every batch is assessed: assessments done/total as a bar on stderr, "
        "or with --json one `run progress` JSON object per line on stderr per change (kind "
        '"regrade", attempts counting assessments, status the backfill\'s), stdout keeping '
        "only the document. Ctrl-C stops the waiting, not the regrade (exit 130).",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Assess a run's retained work again (a backfill of `assessments`); the actor never runs."""
    from synth_pipelines.cli.progress import ProgressDisplay, RunProgress

    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    body = {"judge": None if judge is None else profile_argument(judge, "judge profile")}
    with user_errors():
        started = client.request("POST", f"/v1/runs/{run_id}/regrades", json=body)
    regrade_id, status = started["regrade_id"], started["backfill_status"]
    if wait:
        try:
            with ProgressDisplay("json" if as_json else "bar", errors) as display, user_errors():
                while True:
                    counts = client.request(
                        "GET", f"/v1/runs/{run_id}/regrades/{regrade_id}/progress"
                    )
                    display.show(RunProgress(**counts))
                    status = counts["status"]
                    failed = status in ("FAILED", "CANCELED", "COMPLETED_FAILED")
                    if counts["batches_done"] >= counts["batches_total"] or failed:
                        break
                    time.sleep(2)
        except KeyboardInterrupt:
            # As `synth run start --wait`: Ctrl-C stops the waiting, never the backfill.
            errors.print(
                f"stopped waiting; regrade {regrade_id} of {run_id} goes on: follow it "
                f"at {started['dagster_url']}, then compare with "
                f"`synth run show {run_id} --assessments`",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
    data = {**started, "backfill_status": status}

    def render() -> None:
        console.print(
            f"regrade {regrade_id} of {run_id} by {started['assessor']}: backfill "
            f"{started['backfill_id']} ({status}); compare with "
            f"`synth run show {run_id} --assessments`"
        )
        if started["evaluation_only"]:
            console.print(
                "evaluation-only: the run's attempts have no captured actor calls, so these "
                "assessments cannot train a model"
            )

    emit("run regrade", data, as_json, render)
