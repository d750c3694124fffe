"""`synth run checkpoints|resume|cancel|regrade`: steering a run after it was accepted."""

from __future__ import annotations

import time

import typer

from synth_pipelines.cli.output import (
    JSON_OPTION,
    console,
    emit,
    errors,
    folding_table,
    user_errors,
)
from synth_pipelines.cli.runs import EXIT_INTERRUPTED, my_run, run_app
from synth_pipelines.config import Settings
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.policy_updates import UnresolvedUpdateError
from synth_pipelines.control.runs import RunNotFoundError, get_run
from synth_pipelines.storage.objectstore import configured_object_store
from synth_pipelines.submission.errors import SubmissionError


@run_app.command("checkpoints")
def checkpoints(
    ctx: typer.Context, run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION
) -> None:
    """The checkpoints a training run committed, one per batch, with their lineage; only
    the run's owner may see them."""
    config: Settings = ctx.obj
    engine = control_engine(config)
    found = run_checkpoints(engine, my_run(engine, run_id, config.owner).run_id)

    def render() -> None:
        table = folding_table("batch", "sampler (use with --model)", "optimizer steps", "cursor")
        for checkpoint in found:
            table.add_row(
                checkpoint.batch,
                checkpoint.sampler_path,
                str(checkpoint.optimizer_steps),
                str(checkpoint.dataset_cursor),
            )
        console.print(table)

    emit("run checkpoints", found, as_json, render)


@run_app.command("resume")
def resume(
    ctx: typer.Context, run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION
) -> None:
    """Relaunch an interrupted run from its unfinished batch (never past an unresolved update)."""
    from synth_pipelines.control.run_lifecycle import RunNotActiveError, resume_run

    config: Settings = ctx.obj
    engine = control_engine(config)
    run_id = my_run(engine, run_id, config.owner).run_id
    with user_errors(RunNotFoundError, RunNotActiveError, UnresolvedUpdateError):
        index = resume_run(engine, run_id)
    emit(
        "run resume",
        {"run_id": run_id, "resumed_batch": index},
        as_json,
        lambda: console.print(f"resuming {run_id} at batch {index}; the batch gate relaunches it"),
    )


@run_app.command("cancel")
def cancel(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    reason: str = typer.Option("cancelled by the operator", "--reason"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop a run: no further batch is admitted; in-flight batch runs are terminated."""
    from resources.dagster_instance import terminate_batch_runs
    from synth_pipelines.control.run_lifecycle import cancel_run

    config: Settings = ctx.obj
    engine = control_engine(config)
    run_id = my_run(engine, run_id, config.owner).run_id
    cancelled = cancel_run(engine, run_id, reason)
    terminated = terminate_batch_runs(config.dagster_home, run_id) if cancelled else []
    status = get_run(engine, run_id).status
    emit(
        "run cancel",
        {"run_id": run_id, "status": status, "cancelled": cancelled, "terminated": terminated},
        as_json,
        lambda: console.print(
            f"{run_id} {'cancelled' if cancelled else f'not cancelled: it is already {status}'}"
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
    from synth_pipelines.cli.progress import ProgressDisplay, RegradeCounter
    from synth_pipelines.runtime.regrade import RegradeRefusedError
    from synth_pipelines.runtime.regrade_request import request_regrade
    from synth_pipelines.services.dagster_graphql import (
        DagsterUnavailableError,
        DagsterWebserver,
        backfill_status,
    )
    from synth_pipelines.submission.run_requests import read_profile

    config: Settings = ctx.obj
    engine, webserver = control_engine(config), DagsterWebserver.of(config)
    run = my_run(engine, run_id, config.owner)
    run_id = run.run_id
    with user_errors(RegradeRefusedError, DagsterUnavailableError, SubmissionError):
        pinned = read_profile(engine, judge, "judge profile") if judge else None
        started = request_regrade(
            engine,
            configured_object_store(config),
            run,
            pinned,
            work_dir=config.work_dir,
            webserver=webserver,
        )
    backfill_id = started.backfill_id
    assert backfill_id is not None, "a requested regrade comes back with its launched backfill"
    status = "requested"
    backfill_url = f"{config.dagster_url}/runs/b/{backfill_id}"
    if wait:
        counter = RegradeCounter(engine, started)
        try:
            with ProgressDisplay("json" if as_json else "bar", errors) as display:
                while True:
                    status = backfill_status(webserver, backfill_id)
                    counts = counter.poll(status)
                    display.show(counts)
                    failed = status in ("FAILED", "CANCELED", "COMPLETED_FAILED")
                    if counts.batches_done >= started.batches or failed:
                        break
                    time.sleep(2)
        except KeyboardInterrupt:
            # As `synth run start --wait`: Ctrl-C stops the waiting, never the backfill.
            errors.print(
                f"stopped waiting; regrade {started.regrade_id} of {run_id} goes on: follow it "
                f"at {backfill_url}, then compare with `synth run show {run_id} --assessments`",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
    data = {**started.model_dump(), "backfill_status": status, "dagster_url": backfill_url}

    def render() -> None:
        console.print(
            f"regrade {started.regrade_id} of {run_id} by {started.assessor}: backfill "
            f"{started.backfill_id} ({status}); compare with "
            f"`synth run show {run_id} --assessments`"
        )
        if started.evaluation_only:
            console.print(
                "evaluation-only: the run's attempts have no captured actor calls, so these "
                "assessments cannot train a model"
            )

    emit("run regrade", data, as_json, render)
