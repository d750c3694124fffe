"""`synth run start|list|show|events`."""

from __future__ import annotations

import time

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from synth_pipelines.cli.inputs import read_plan, read_profile
from synth_pipelines.cli.output import (
    EXIT_RUN_FAILED,
    JSON_OPTION,
    console,
    emit,
    errors,
    user_errors,
)
from synth_pipelines.config import settings
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import RunEvent, read_events
from synth_pipelines.control.runs import (
    IdempotencyConflictError,
    RunNotFoundError,
    RunRecord,
    accept_run,
    get_run,
    list_runs,
)
from synth_pipelines.registry.datasets import DatasetError, get_dataset
from synth_pipelines.runtime.results import RunResults, collect_results
from synth_pipelines.storage.objectstore import open_object_store

run_app = typer.Typer(help="Submit experiments and inspect their runs.", no_args_is_help=True)


def _store():
    config = settings()
    return open_object_store(config.objects_url, endpoint_url=config.s3_endpoint_url)


def dagster_runs_url(run_id: str) -> str:
    return f"{settings().dagster_url}/runs?q%5B0%5D=tag%3Asynth%2Frun%3D{run_id}"


def _run_summary(run: RunRecord) -> dict:
    spec = run.spec
    return {
        "run_id": run.run_id,
        "status": run.status,
        "kind": run.kind,
        "owner": run.owner,
        "dataset": spec.dataset.ref,
        "actor": f"{spec.actor.name}@{spec.actor.version}",
        "actor_digest": spec.actor.digest,
        "batches": run.batch_count,
        "idempotency_key": run.idempotency_key,
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
        "dagster_url": dagster_runs_url(run.run_id),
    }


@run_app.command("start")
def start(
    dataset: str = typer.Option(..., "--dataset", help="Dataset version, org/name@version."),
    actor: str = typer.Option(
        ...,
        "--actor",
        help="Actor profile: @file.json, inline JSON, or a published org/name@version.",
    ),
    plan: str = typer.Option(..., "--plan", help="Plan: @file.json or inline JSON."),
    idempotency_key: str | None = typer.Option(
        None, "--idempotency-key", help="Retrying with the same key returns the same run."
    ),
    wait: bool = typer.Option(False, "--wait", help="Follow the run until it finishes."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Accept an experiment and return its durable run id at once."""
    engine = control_engine()
    with user_errors(DatasetError, IdempotencyConflictError):
        version = get_dataset(engine, dataset)
        request = RunRequest(
            owner=settings().owner,
            dataset=DatasetPin(
                name=version.name,
                version=version.version,
                digest=version.digest,
                task_count=version.task_count,
            ),
            actor=read_profile(engine, actor, "actor profile"),
            plan=read_plan(plan),
        )
        run, created = accept_run(engine, request, idempotency_key)
    if wait:
        run = follow_run(run.run_id, quiet=as_json)
        show_results(run, as_json)
        if run.status != "succeeded":
            raise typer.Exit(EXIT_RUN_FAILED)
        return
    emit(
        {**_run_summary(run), "created": created},
        as_json,
        lambda: console.print(
            f"{'accepted' if created else 'already accepted'} run [bold]{run.run_id}[/] "
            f"({run.status}); follow it with `synth run events {run.run_id} --follow`"
        ),
    )


def follow_run(run_id: str, *, quiet: bool, poll_sec: float = 1.0) -> RunRecord:
    """Wait for a run to finish, with a progress bar over its attempts."""
    engine = control_engine()
    run = get_run(engine, run_id)
    total_attempts = run.spec.task_limit * run.spec.attempts_per_task
    if run.kind == "train":
        total_attempts = run.batch_count * run.spec.tasks_per_batch * run.spec.attempts_per_task
    cursor, finished = 0, 0
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        disable=quiet,
        transient=True,
    ) as progress:
        bar = progress.add_task(f"{run_id} attempts", total=total_attempts)
        while True:
            for event in read_events(engine, run_id=run_id, after=cursor):
                cursor = event.seq
                if event.kind == "attempt.finished":
                    finished += 1
                    progress.update(bar, completed=finished)
            run = get_run(engine, run_id)
            if run.finished:
                return run
            time.sleep(poll_sec)


def _results_table(results: RunResults) -> Table:
    table = Table("task", "attempts", "rewards", "pass rate")
    for task in results.tasks:
        rewards = ", ".join("-" if r is None else f"{r:g}" for r in task.rewards)
        rate = "-" if task.pass_rate is None else f"{task.pass_rate:.0%}"
        table.add_row(task.task_name, str(task.attempts), rewards, rate)
    return table


def show_results(run: RunRecord, as_json: bool) -> None:
    store = _store()
    results = collect_results(control_engine(), store, run)
    summary = results.summary

    def render() -> None:
        console.print(
            f"run [bold]{run.run_id}[/] {run.status}: {run.kind} of {run.spec.dataset.ref} "
            f"with {run.spec.actor.name}@{run.spec.actor.version} "
            f"({results.batches_done}/{run.batch_count} batches)"
        )
        console.print(_results_table(results))
        rate = "-" if summary.pass_rate is None else f"{summary.pass_rate:.1%}"
        console.print(
            f"attempts {summary.attempts}, assessed {summary.assessed}, passed {summary.passed}, "
            f"pass rate {rate}"
        )
        console.print(f"trial records: {store.uri(f'runs/{run.run_id}/trials')}")
        console.print(f"Dagster UI: {dagster_runs_url(run.run_id)}")

    emit(
        {
            **_run_summary(run),
            "summary": summary.as_dict(),
            "batches_done": results.batches_done,
            "tasks": [task.as_dict() for task in results.tasks],
            "trial_records": store.uri(f"runs/{run.run_id}/trials"),
        },
        as_json,
        render,
    )


@run_app.command("show")
def show(run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION) -> None:
    """Status, per-task attempts and rewards, pass rate, and where the work is."""
    with user_errors(RunNotFoundError):
        run = get_run(control_engine(), run_id)
    show_results(run, as_json)
    if run.status == "failed":
        raise typer.Exit(EXIT_RUN_FAILED)


@run_app.command("list")
def list_(limit: int = typer.Option(50, "--limit", min=1), as_json: bool = JSON_OPTION) -> None:
    """Recent runs, newest first."""
    found = list_runs(control_engine(), limit=limit)

    def render() -> None:
        table = Table("run", "status", "kind", "dataset", "actor", "created")
        for run in found:
            table.add_row(
                run.run_id,
                run.status,
                run.kind,
                run.spec.dataset.ref,
                f"{run.spec.actor.name}@{run.spec.actor.version}",
                run.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            )
        console.print(table)

    emit([_run_summary(run) for run in found], as_json, render)


def _print_event(event: RunEvent, as_json: bool) -> None:
    if as_json:
        import json

        typer.echo(json.dumps(event.as_dict(), sort_keys=True))
    else:
        details = " ".join(f"{k}={v}" for k, v in sorted(event.data.items()))
        console.print(
            f"{event.seq:>8} {event.created_at:%H:%M:%S} {event.kind:<18} {details}",
            highlight=False,
        )


@run_app.command("events")
def events(
    run_id: str = typer.Argument(...),
    after: int = typer.Option(0, "--after", min=0, help="Resume after this cursor (seq)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
) -> None:
    """Ordered run events; the seq of the last one printed is the cursor to resume from."""
    engine = control_engine()
    with user_errors(RunNotFoundError):
        get_run(engine, run_id)
    cursor = after
    while True:
        for event in read_events(engine, run_id=run_id, after=cursor):
            cursor = event.seq
            _print_event(event, as_json)
        if not follow:
            return
        if get_run(engine, run_id).finished and not read_events(
            engine, run_id=run_id, after=cursor, limit=1
        ):
            return
        time.sleep(1.0)
