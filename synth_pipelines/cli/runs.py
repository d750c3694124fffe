"""`synth run start|list|show|events`."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from synth_pipelines.cli.output import (
    EXIT_RUN_FAILED,
    JSON_LINES_OPTION,
    JSON_OPTION,
    console,
    document_text,
    emit,
    errors,
    fail,
    folding_table,
    inert,
    user_errors,
)
from synth_pipelines.cli.progress import WAIT_HELP, ProgressDisplay, RunCounter
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import RunSummary, dagster_runs_url
from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.ownership import NotOwnerError, owned_run
from synth_pipelines.control.run_document_fingerprint import STOP_EVENTS
from synth_pipelines.control.runs import (
    KINDS,
    STATUSES,
    AmbiguousRunIdError,
    IdempotencyConflictError,
    RunNotFoundError,
    get_run,
    list_runs,
    resolve_run_id,
)
from synth_pipelines.storage.objectstore import configured_object_store

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from synth_pipelines.runtime.results import RunResults
    from synth_pipelines.submission.run_requests import Submission

DEFAULT_MAX_PLATFORM_ERRORS = 0.02
"""A comparison is refused above this share of attempts the platform failed."""

EXIT_INTERRUPTED = 130
"""Ctrl-C stopped the waiting (the shell's code for SIGINT); the run goes on."""

run_app = typer.Typer(help="Submit experiments and inspect their runs.", no_args_is_help=True)


@run_app.command("start")
def start(
    ctx: typer.Context,
    dataset: str = typer.Option(..., "--dataset", help="Dataset version, org/name@version."),
    actor: str = typer.Option(
        ...,
        "--actor",
        help="Actor profile: @file.json, inline JSON, or a published org/name@version.",
    ),
    plan: str = typer.Option(..., "--plan", help="Plan: @file.json or inline JSON."),
    judge: str | None = typer.Option(
        None, "--judge", help="Judge profile in place of the tasks' verifiers (evaluations)."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Bind the actor to this base model or checkpoint (tinker://...)."
    ),
    idempotency_key: str | None = typer.Option(
        None, "--idempotency-key", help="Retrying with the same key returns the same run."
    ),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    as_json: bool = JSON_OPTION,
) -> None:
    """Accept an experiment and return its durable run id at once."""
    from synth_pipelines.submission.run_requests import Submission

    start_run(
        ctx.obj,
        Submission(dataset=dataset, actor=actor, plan=plan, judge=judge, model=model),
        idempotency_key,
        wait=wait,
        as_json=as_json,
    )


def start_run(
    config: Settings,
    submission: Submission,
    idempotency_key: str | None,
    *,
    wait: bool,
    as_json: bool,
) -> None:
    from synth_pipelines.registry.datasets import DatasetError
    from synth_pipelines.runtime.served_models import ModelNotServedError, served_models
    from synth_pipelines.submission.run_requests import submit_run

    engine = control_engine(config)
    with user_errors(DatasetError, IdempotencyConflictError, ModelNotServedError):
        run, created = submit_run(
            engine,
            submission,
            config.owner,
            idempotency_key,
            models=served_models(config),
        )
    if wait:
        finish_waiting(config, wait_for_run(engine, run.run_id, as_json), as_json)
        return
    emit(
        "run start",
        {**RunSummary.of(run, config.dagster_url).model_dump(), "created": created},
        as_json,
        lambda: console.print(
            f"{'accepted' if created else 'already accepted'} run [bold]{run.run_id}[/] "
            f"({run.status}); follow it with `synth run events {run.run_id} --follow`"
        ),
    )


def my_run(engine: Engine, run_id: str, owner: str) -> RunRecord:
    """The run named by its whole id or a unique prefix of it, if the operator
    (`SYNTH_OWNER`, `owner`) owns it; otherwise a one-line refusal."""
    with user_errors(RunNotFoundError, AmbiguousRunIdError, NotOwnerError):
        return owned_run(engine, resolve_run_id(engine, run_id, owner), owner)


def follow_run(engine: Engine, run_id: str, *, as_json: bool, poll_sec: float = 1.0) -> RunRecord:
    """Wait for a run to finish (or be interrupted), showing its progress on stderr: a bar,
    or with `--json` a JSON line per change."""
    run = get_run(engine, run_id)
    counter = RunCounter(engine, run)
    with ProgressDisplay("json" if as_json else "bar", errors) as display:
        while True:
            run = get_run(engine, run_id)
            display.show(counter.poll(run))
            if run.finished or run.status == "interrupted":
                return run
            time.sleep(poll_sec)


def wait_for_run(engine: Engine, run_id: str, as_json: bool) -> RunRecord:
    """`follow_run`, where Ctrl-C stops the waiting and never the run: one line says how
    to wait again, and the command exits 130."""
    try:
        return follow_run(engine, run_id, as_json=as_json)
    except KeyboardInterrupt:
        errors.print(
            f"stopped waiting; run {run_id} goes on: wait again with `synth run wait {run_id}`",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None


def finish_waiting(config: Settings, run: RunRecord, as_json: bool) -> None:
    """The finished run's results, and exit 1 unless it succeeded."""
    show_results(config, run, as_json)
    if run.status != "succeeded":
        if run.status == "interrupted":
            errors.print(
                f"run interrupted; see `synth run events {run.run_id}`, then "
                f"`synth run resume {run.run_id}`"
            )
        raise typer.Exit(EXIT_RUN_FAILED)


@run_app.command("wait")
def wait_command(
    ctx: typer.Context, run_id: str = typer.Argument(...), as_json: bool = JSON_OPTION
) -> None:
    """Follow a run already started until it finishes, with the progress of `run start
    --wait` on stderr (JSON lines with `--json`), then print what `run show` prints.
    Ctrl-C stops the waiting, not the run."""
    config: Settings = ctx.obj
    engine = control_engine(config)
    run = my_run(engine, run_id, config.owner)
    finish_waiting(config, wait_for_run(engine, run.run_id, as_json), as_json)


def _results_table(results: RunResults) -> Table:
    table = Table("task", "attempts", "rewards", "pass rate")
    for task in results.tasks:
        rewards = ", ".join("-" if r is None else f"{r:g}" for r in task.rewards)
        rate = "-" if task.pass_rate is None else f"{task.pass_rate:.0%}"
        table.add_row(inert(task.task_name), str(task.attempts), rewards, rate)
    return table


def stop_cause(engine: Engine, run: RunRecord) -> dict[str, Any] | None:
    """What stopped an interrupted or failed run: its last stop event's data."""
    if run.status not in ("interrupted", "failed"):
        return None
    stops = read_events(engine, run_id=run.run_id, kinds=STOP_EVENTS, limit=100_000)
    if not stops:
        return None
    data = stops[-1].data
    return {"event": stops[-1].kind, "batch": data.get("batch"), "cause": data.get("cause")}


def describe_stop(stop: dict[str, Any]) -> str:
    cause = stop.get("cause")
    where = f" in batch {stop['batch']}" if stop.get("batch") else ""
    if not cause:
        return f"{stop['event']}{where}"
    attempt = f" ({cause['attempt']})" if cause.get("attempt") else ""
    return f"{stop['event']}{where}: {cause['error_type']}: {cause['message']}{attempt}"


def show_results(config: Settings, run: RunRecord, as_json: bool) -> None:
    from synth_pipelines.cli.batch_learning import (
        batch_series,
        learning_rows,
        learning_tables,
        learning_warnings,
        reward_trend,
        series_table,
    )
    from synth_pipelines.control.run_documents import current_fingerprint, store_run_document
    from synth_pipelines.runtime.results import collect_results

    store = configured_object_store(config)
    engine = control_engine(config)
    kept = None
    if as_json:
        # Fingerprint first, then read: a change made while this reads leaves the kept
        # document marked older than what it holds, so it is built again, never served stale.
        kept = current_fingerprint(engine, run.run_id, config.objects_url)
        run = get_run(engine, run.run_id)
    results = collect_results(engine, store, run)
    summary = results.summary
    stop = stop_cause(engine, run)
    learning = learning_rows(engine, run.run_id) if run.kind == "train" else []
    warnings = learning_warnings(learning)
    series = batch_series(engine, run.run_id) if run.kind == "train" else []

    def render() -> None:
        console.print(
            f"run [bold]{run.run_id}[/] {run.status}: {run.kind} of {run.spec.dataset.ref} "
            f"with {run.spec.actor.name}@{run.spec.actor.version} "
            f"({results.batches_done}/{run.batch_count} batches)"
        )
        if stop is not None:
            errors.print(inert(describe_stop(stop)), highlight=False, soft_wrap=True)
        if series:
            console.print(series_table(series))
            trend = reward_trend(series)
            if trend is not None:
                console.print(trend, highlight=False)
        console.print(_results_table(results))
        rate = "-" if summary.pass_rate is None else f"{summary.pass_rate:.1%}"
        console.print(
            f"attempts {summary.attempts}, assessed {summary.assessed}, passed {summary.passed}, "
            f"pass rate {rate}; not assessed: {summary.platform_errors} platform error(s), "
            f"{summary.task_errors} task error(s)"
        )
        for reason, count in summary.error_reasons.items():
            console.print(f"  {count} x {inert(reason)}", highlight=False, soft_wrap=True)
        if summary.platform_errors:
            errors.print(
                f"warning: {summary.platform_errors} of {summary.attempts} attempts failed on the "
                "platform and are not counted in pass@1 or mean reward",
                soft_wrap=True,
            )
        for table in learning_tables(learning):
            console.print(table)
        for row in learning:
            dropped = ", ".join(f"{n} {why}" for why, n in row.groups_dropped.items())
            console.print(
                f"  batch {row.batch_index} sampled from {row.sampler}"
                + (f"; groups dropped: {dropped}" if dropped else ""),
                highlight=False,
                soft_wrap=True,
            )
        for warning in warnings:
            errors.print(f"warning: {warning}", soft_wrap=True, highlight=False)
        console.print(f"trial records: {store.uri(f'runs/{run.run_id}/trials')}")
        console.print(f"Dagster UI: {dagster_runs_url(config.dagster_url, run.run_id)}")

    data = {
        **RunSummary.of(run, config.dagster_url).model_dump(),
        "summary": summary.as_dict(),
        "stopped_by": stop,
        "batches_done": results.batches_done,
        "learning": learning,
        "learning_warnings": warnings,
        "tasks": [task.as_dict() for task in results.tasks],
        "trial_records": store.uri(f"runs/{run.run_id}/trials"),
    }
    if kept is None:
        render()
        return
    text = document_text("run show", data)
    sys.stdout.write(text)
    store_run_document(engine, run.run_id, kept, text)


@run_app.command("show")
def show(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    assessments: bool = typer.Option(
        False, "--assessments", help="Compare every assessor of the run's work (regrades)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Status, per-task attempts and rewards, pass rate, and where the work is."""
    config: Settings = ctx.obj
    run = my_run(control_engine(config), run_id, config.owner)
    if assessments:
        show_assessments(config, run, as_json)
    else:
        show_results(config, run, as_json)
    if run.status in ("failed", "interrupted"):
        raise typer.Exit(EXIT_RUN_FAILED)


def show_assessments(config: Settings, run: RunRecord, as_json: bool) -> None:
    from synth_pipelines.runtime.assessment_comparison import (
        agreements,
        assessment_sets,
        verdicts_by_task,
    )

    sets = assessment_sets(control_engine(config), configured_object_store(config), run)
    pairs = agreements(sets)
    by_task = verdicts_by_task(sets)

    def render() -> None:
        table = Table("assessor", "assessed", "pass rate")
        for group in sets:
            rate = group.pass_rate()
            table.add_row(
                inert(group.label), str(len(group.verdicts)), "-" if rate is None else f"{rate:.0%}"
            )
        console.print(table)
        for pair in pairs:
            agreement = "-" if pair.rate is None else f"{pair.rate:.0%}"
            console.print(
                f"agreement {agreement} ({pair.agreeing}/{pair.compared}) between "
                f"{inert(pair.first)} and {inert(pair.second)}"
                + (
                    f"; they differ on {inert(', '.join(pair.differing_tasks))}"
                    if pair.differing_tasks
                    else ""
                )
            )
        tasks = Table("task", *(inert(group.label) for group in sets))
        for task, verdicts in sorted(by_task.items()):
            tasks.add_row(
                inert(task),
                *(
                    ", ".join("-" if r is None else f"{r:g}" for r in verdicts.get(group.label, []))
                    for group in sets
                ),
            )
        console.print(tasks)

    emit(
        "run show --assessments",
        {
            "run_id": run.run_id,
            "assessment_sets": [
                {
                    "label": group.label,
                    "assessor": group.assessor,
                    "assessor_digest": group.assessor_digest,
                    "assessed": len(group.verdicts),
                    "pass_rate": group.pass_rate(),
                }
                for group in sets
            ],
            "agreements": [
                {
                    "first": pair.first,
                    "second": pair.second,
                    "compared": pair.compared,
                    "agreeing": pair.agreeing,
                    "rate": pair.rate,
                    "differing_tasks": list(pair.differing_tasks),
                }
                for pair in pairs
            ],
            "tasks": by_task,
        },
        as_json,
        render,
    )


def checked_choice(value: str | None, option: str, choices: tuple[str, ...]) -> str | None:
    """`value` if it is one of `choices` (or not given); otherwise a one-line refusal."""
    if value is not None and value not in choices:
        fail(f"{option} {value!r} is not one of {', '.join(choices)}")
    return value


@run_app.command("list")
def list_(
    ctx: typer.Context,
    limit: int = typer.Option(50, "--limit", min=1),
    kind: str | None = typer.Option(None, "--kind", help=f"Only runs of this kind: {KINDS}."),
    status: str | None = typer.Option(
        None, "--status", help=f"Only runs in this status: {STATUSES}."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Your recent runs (`SYNTH_OWNER`), newest first, with the model each sampled from."""
    config: Settings = ctx.obj
    found = list_runs(
        control_engine(config),
        owner=config.owner,
        limit=limit,
        kind=checked_choice(kind, "--kind", KINDS),
        status=checked_choice(status, "--status", STATUSES),
    )

    def render() -> None:
        # Two lines a run, so that at 80 columns the id stays on one line and the model
        # that tells a baseline from a trained checkpoint has room.
        table = folding_table(
            "run / created", "status / kind", "model", "actor / dataset", show_lines=True
        )
        table.columns[0].no_wrap = table.columns[1].no_wrap = True
        for run in found:
            table.add_row(
                f"{run.run_id}\n{run.created_at:%Y-%m-%d %H:%M}",
                f"{run.status}\n{run.kind}",
                run.spec.actor_model or "-",
                f"{run.spec.actor.name}@{run.spec.actor.version}\n{run.spec.dataset.ref}",
            )
        console.print(table)

    emit(
        "run list",
        [RunSummary.of(run, config.dagster_url).model_dump() for run in found],
        as_json,
        render,
    )


def _print_event(event: RunEvent, as_json: bool) -> None:
    if as_json:
        from synth_pipelines.contracts.documents import validated

        typer.echo(json.dumps(validated("run events", event), sort_keys=True))
    else:
        details = inert(" ".join(f"{k}={v}" for k, v in sorted(event.data.items())))
        console.print(
            f"{event.seq:>8} {event.created_at:%H:%M:%S} {event.kind:<18} {details}",
            highlight=False,
        )


@run_app.command("events")
def events(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    after: int = typer.Option(0, "--after", min=0, help="Resume after this cursor (seq)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    as_json: bool = JSON_LINES_OPTION,
) -> None:
    """Ordered run events; the seq of the last one printed is the cursor to resume from."""
    config: Settings = ctx.obj
    engine = control_engine(config)
    run_id = my_run(engine, run_id, config.owner).run_id
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


@run_app.command("compare")
def compare(
    ctx: typer.Context,
    baseline: str = typer.Argument(..., help="The run to compare against."),
    candidate: str = typer.Argument(..., help="The run that should be better."),
    max_platform_errors: float = typer.Option(
        DEFAULT_MAX_PLATFORM_ERRORS,
        "--max-platform-errors",
        min=0.0,
        max=1.0,
        help="Refuse to compare a run whose share of attempts the platform failed is above this.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """pass@1 of two runs with 95% Wilson intervals, and Fisher's exact test. Attempts that
    were not assessed (platform or task errors) are excluded and counted."""
    from synth_pipelines.runtime.comparison import Proportion, fisher_exact
    from synth_pipelines.runtime.results import collect_results

    config: Settings = ctx.obj
    engine = control_engine(config)
    store = configured_object_store(config)
    runs = [my_run(engine, baseline, config.owner), my_run(engine, candidate, config.owner)]
    rows: list[dict[str, Any]] = []
    proportions = []
    for run in runs:
        summary = collect_results(engine, store, run).summary
        proportion = Proportion(summary.passed, summary.assessed)
        proportions.append(proportion)
        rows.append(
            {
                "run_id": run.run_id,
                "status": run.status,
                "dataset": run.spec.dataset.ref,
                "model": run.spec.actor_model,
                "attempts": summary.attempts,
                "assessed": summary.assessed,
                "passed": summary.passed,
                "platform_errors": summary.platform_errors,
                "task_errors": summary.task_errors,
                "pass_at_1": proportion.rate,
                "wilson_95": proportion.wilson(),
            }
        )
    for row in rows:
        share = row["platform_errors"] / row["attempts"] if row["attempts"] else 0.0
        if share > max_platform_errors:
            fail(
                f"run {row['run_id']} has {row['platform_errors']} platform error(s) in "
                f"{row['attempts']} attempts ({share:.1%}), above --max-platform-errors "
                f"{max_platform_errors:.1%}: its pass@1 measures the platform, not the model "
                "(`synth run show` says why); pass --max-platform-errors 1 to compare anyway",
                code=EXIT_RUN_FAILED,
            )
    test = fisher_exact(proportions[0], proportions[1])
    notes = [
        f"{row['run_id']} is {row['status']}: its numbers are partial"
        for row in rows
        if row["status"] != "succeeded"
    ]
    if rows[0]["dataset"] != rows[1]["dataset"]:
        notes.append("the runs evaluated different datasets: this is not a like-for-like test")
    rates = [row["pass_at_1"] for row in rows]
    document = {
        "baseline": rows[0],
        "candidate": rows[1],
        "difference": None if None in rates else rates[1] - rates[0],
        "fisher_p_two_sided": test.two_sided,
        "fisher_p_greater": test.greater,
        "notes": notes,
    }

    def render() -> None:
        table = folding_table(
            "", "run", "passed/assessed", "pass@1", "95% CI (Wilson)", "excluded (platform/task)"
        )
        for label, row in zip(("baseline", "candidate"), rows, strict=True):
            interval = row["wilson_95"]
            table.add_row(
                label,
                row["run_id"],
                f"{row['passed']}/{row['assessed']}",
                "-" if row["pass_at_1"] is None else f"{row['pass_at_1']:.1%}",
                "-" if interval is None else f"{interval[0]:.1%} - {interval[1]:.1%}",
                f"{row['platform_errors']}/{row['task_errors']}",
            )
        console.print(table)
        for label, row in zip(("baseline", "candidate"), rows, strict=True):
            console.print(f"{label} model: {row['model']}", highlight=False, soft_wrap=True)
        if document["difference"] is not None:
            console.print(f"difference {document['difference']:+.1%}")
        console.print(
            f"Fisher exact p = {test.two_sided:.3g} (two-sided), "
            f"{test.greater:.3g} (candidate better)"
        )
        for note in notes:
            errors.print(f"note: {note}")

    emit("run compare", document, as_json, render)
