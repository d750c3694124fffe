"""`synth run start|list|show|events`."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import typer
from rich.table import Table

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import (
    EXIT_RUN_FAILED,
    JSON_LINES_OPTION,
    JSON_OPTION,
    console,
    emit,
    errors,
    fail,
    folding_table,
    inert,
    user_errors,
)
from synth_pipelines.cli.progress import WAIT_HELP, ProgressDisplay, RunProgress
from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import RunSummary
from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.contracts.run_record import KINDS, STATUSES, TERMINAL

if TYPE_CHECKING:
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


def profile_argument(value: str, what: str) -> str | dict[str, Any]:
    """A published `org/name@version` as it is, else the profile's document, read here
    (the gateway never reads a file the client names) and checked before it is sent."""
    from synth_pipelines.submission.run_requests import pinned_document, read_json_argument

    if not value.startswith("@") and not value.lstrip().startswith("{"):
        return value
    with user_errors():
        document = read_json_argument(value, what)
        pinned_document(document, what, value)
    return document


def submission_body(submission: Submission, idempotency_key: str | None) -> dict[str, Any]:
    """The `POST /v1/runs` body: the plan and profiles as documents, read and checked here."""
    from synth_pipelines.submission.run_requests import read_json_argument, read_plan

    with user_errors():
        plan = read_plan(submission.plan)
    if submission.kinds and plan.kind not in submission.kinds:
        fail(
            f"plan {submission.plan} is a {plan.kind!r} plan; this command takes "
            + " or ".join(repr(kind) for kind in submission.kinds)
            + " plans"
        )
    judge = submission.judge
    return {
        "dataset": submission.dataset,
        "actor": profile_argument(submission.actor, "actor profile"),
        "plan": read_json_argument(submission.plan, "plan"),  # read and checked above
        "judge": None if judge is None else profile_argument(judge, "judge profile"),
        "model": submission.model,
        "idempotency_key": idempotency_key,
        "kinds": list(submission.kinds),
    }


def start_run(
    config: Settings,
    submission: Submission,
    idempotency_key: str | None,
    *,
    wait: bool,
    as_json: bool,
) -> None:
    client = GatewayClient(config)
    with user_errors():
        accepted = client.request(
            "POST", "/v1/runs", json=submission_body(submission, idempotency_key)
        )
    run_id = accepted["run_id"]
    if wait:
        finish_waiting(client, wait_for_run(client, run_id, as_json), as_json)
        return
    emit(
        "run start",
        accepted,
        as_json,
        lambda: console.print(
            f"{'accepted' if accepted['created'] else 'already accepted'} run [bold]{run_id}[/] "
            f"({accepted['status']}); follow it with `synth run events {run_id} --follow`"
        ),
    )


def my_run(client: GatewayClient, run_id: str) -> RunSummary:
    """The run named by its whole id or a unique prefix of it, if the key's owner owns
    it; otherwise the gateway's one-line refusal."""
    with user_errors():
        return RunSummary.model_validate(client.request("GET", f"/v1/runs/{quote(run_id)}"))


def follow_run(
    client: GatewayClient, run_id: str, *, as_json: bool, poll_sec: float = 1.0
) -> RunSummary:
    """Wait for a run to finish (or be interrupted), showing its progress on stderr: a bar,
    or with `--json` a JSON line per change."""
    with ProgressDisplay("json" if as_json else "bar", errors) as display, user_errors():
        while True:
            counts = client.request("GET", f"/v1/runs/{run_id}/progress")
            display.show(RunProgress(**counts))
            if counts["status"] in (*TERMINAL, "interrupted"):
                return my_run(client, run_id)
            time.sleep(poll_sec)


def wait_for_run(client: GatewayClient, run_id: str, as_json: bool) -> RunSummary:
    """`follow_run`, where Ctrl-C stops the waiting and never the run: one line says how
    to wait again, and the command exits 130."""
    try:
        return follow_run(client, run_id, as_json=as_json)
    except KeyboardInterrupt:
        errors.print(
            f"stopped waiting; run {run_id} goes on: wait again with `synth run wait {run_id}`",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None


def finish_waiting(client: GatewayClient, run: RunSummary, as_json: bool) -> None:
    """The finished run's results, and exit 1 unless it succeeded."""
    show_results(client, run, as_json)
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
    client = GatewayClient(ctx.obj)
    run = my_run(client, run_id)
    finish_waiting(client, wait_for_run(client, run.run_id, as_json), as_json)


def _results_table(tasks: list[dict[str, Any]]) -> Table:
    table = Table("task", "attempts", "rewards", "pass rate")
    for task in tasks:
        rewards = ", ".join("-" if r is None else f"{r:g}" for r in task["rewards"])
        rate = "-" if task["pass_rate"] is None else f"{task['pass_rate']:.0%}"
        table.add_row(inert(task["task"]), str(task["attempts"]), rewards, rate)
    return table


def describe_stop(stop: dict[str, Any]) -> str:
    cause = stop.get("cause")
    where = f" in batch {stop['batch']}" if stop.get("batch") else ""
    if not cause:
        return f"{stop['event']}{where}"
    attempt = f" ({cause['attempt']})" if cause.get("attempt") else ""
    return f"{stop['event']}{where}: {cause['error_type']}: {cause['message']}{attempt}"


def results(client: GatewayClient, run_id: str) -> tuple[str, dict[str, Any]]:
    """The `run show` document as the gateway printed it, and parsed."""
    with user_errors():
        text = client.text("GET", f"/v1/runs/{run_id}/results")
    return text, json.loads(text)


def show_results(client: GatewayClient, run: RunSummary, as_json: bool) -> None:
    from synth_pipelines.cli.batch_learning import (
        learning_tables,
        reward_trend,
        series_table,
    )
    from synth_pipelines.contracts.policy_update import BatchLearningRow

    text, shown = results(client, run.run_id)
    if as_json:
        sys.stdout.write(text)
        return
    summary = shown["summary"]
    learning = [BatchLearningRow.model_validate(row) for row in shown["learning"]]
    series = []
    if shown["kind"] == "train":
        with user_errors():
            series = client.request("GET", f"/v1/runs/{run.run_id}/metrics")["batches"]
    console.print(
        f"run [bold]{shown['run_id']}[/] {shown['status']}: {shown['kind']} of {shown['dataset']} "
        f"with {shown['actor']} ({shown['batches_done']}/{shown['batches']} batches)"
    )
    if shown["stopped_by"] is not None:
        errors.print(inert(describe_stop(shown["stopped_by"])), highlight=False, soft_wrap=True)
    if series:
        console.print(series_table(series))
        trend = reward_trend(series)
        if trend is not None:
            console.print(trend, highlight=False)
    console.print(_results_table(shown["tasks"]))
    rate = "-" if summary["pass_rate"] is None else f"{summary['pass_rate']:.1%}"
    console.print(
        f"attempts {summary['attempts']}, assessed {summary['assessed']}, passed "
        f"{summary['passed']}, pass rate {rate}; not assessed: {summary['platform_errors']} "
        f"platform error(s), {summary['task_errors']} task error(s)"
    )
    for reason, count in summary["error_reasons"].items():
        console.print(f"  {count} x {inert(reason)}", highlight=False, soft_wrap=True)
    if summary["platform_errors"]:
        errors.print(
            f"warning: {summary['platform_errors']} of {summary['attempts']} attempts failed on "
            "the platform and are not counted in pass@1 or mean reward",
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
    for warning in shown["learning_warnings"]:
        errors.print(f"warning: {warning}", soft_wrap=True, highlight=False)
    console.print(f"trial records: {shown['trial_records']}")
    console.print(f"Dagster UI: {shown['dagster_url']}")


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
    client = GatewayClient(ctx.obj)
    run = my_run(client, run_id)
    if assessments:
        show_assessments(client, run, as_json)
    else:
        show_results(client, run, as_json)
    if run.status in ("failed", "interrupted"):
        raise typer.Exit(EXIT_RUN_FAILED)


def show_assessments(client: GatewayClient, run: RunSummary, as_json: bool) -> None:
    with user_errors():
        compared = client.request("GET", f"/v1/runs/{run.run_id}/assessments")
    sets, pairs, by_task = compared["assessment_sets"], compared["agreements"], compared["tasks"]

    def render() -> None:
        table = Table("assessor", "assessed", "pass rate")
        for group in sets:
            rate = group["pass_rate"]
            table.add_row(
                inert(group["label"]),
                str(group["assessed"]),
                "-" if rate is None else f"{rate:.0%}",
            )
        console.print(table)
        for pair in pairs:
            agreement = "-" if pair["rate"] is None else f"{pair['rate']:.0%}"
            differing = pair["differing_tasks"]
            console.print(
                f"agreement {agreement} ({pair['agreeing']}/{pair['compared']}) between "
                f"{inert(pair['first'])} and {inert(pair['second'])}"
                + (f"; they differ on {inert(', '.join(differing))}" if differing else "")
            )
        tasks = Table("task", *(inert(group["label"]) for group in sets))
        for task, verdicts in sorted(by_task.items()):
            tasks.add_row(
                inert(task),
                *(
                    ", ".join(
                        "-" if r is None else f"{r:g}" for r in verdicts.get(group["label"], [])
                    )
                    for group in sets
                ),
            )
        console.print(tasks)

    emit("run show --assessments", compared, as_json, render)


def checked_choice(value: str | None, option: str, choices: tuple[str, ...]) -> str | None:
    """`value` if it is one of `choices` (or not given); otherwise a one-line refusal."""
    if value is not None and value not in choices:
        fail(f"{option} {value!r} is not one of {', '.join(choices)}")
    return value


@run_app.command("list")
def list_(
    ctx: typer.Context,
    limit: int = typer.Option(50, "--limit", min=1, max=1000),
    kind: str | None = typer.Option(None, "--kind", help=f"Only runs of this kind: {KINDS}."),
    status: str | None = typer.Option(
        None, "--status", help=f"Only runs in this status: {STATUSES}."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Your recent runs (the API key's owner's), newest first, with the model each sampled
    from."""
    query: dict[str, Any] = {"limit": limit}
    if checked_choice(kind, "--kind", KINDS) is not None:
        query["kind"] = kind
    if checked_choice(status, "--status", STATUSES) is not None:
        query["status"] = status
    with user_errors():
        found = GatewayClient(ctx.obj).request("GET", "/v1/runs", params=query)

    def render() -> None:
        # Two lines a run, so that at 80 columns the id stays on one line and the model
        # that tells a baseline from a trained checkpoint has room.
        table = folding_table(
            "run / created", "status / kind", "model", "actor / dataset", show_lines=True
        )
        table.columns[0].no_wrap = table.columns[1].no_wrap = True
        for run in found:
            created = datetime.fromisoformat(run["created_at"])
            table.add_row(
                f"{run['run_id']}\n{created:%Y-%m-%d %H:%M}",
                f"{run['status']}\n{run['kind']}",
                run["actor_model"] or "-",
                f"{run['actor']}\n{run['dataset']}",
            )
        console.print(table)

    emit("run list", found, as_json, render)


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
    """Ordered run events; the seq of the last one printed is the cursor to resume from.
    `--follow` streams them (server-sent events) until the run ends."""
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    with user_errors():
        if follow:
            for event in client.follow(f"/v1/runs/{run_id}/events", after):
                _print_event(event, as_json)
            return
        cursor = after
        while page := client.request("GET", f"/v1/runs/{run_id}/events", params={"after": cursor}):
            for data in page:
                event = RunEvent.model_validate(data)
                cursor = event.seq
                _print_event(event, as_json)


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

    client = GatewayClient(ctx.obj)
    rows: list[dict[str, Any]] = []
    proportions = []
    for named in (baseline, candidate):
        shown = results(client, my_run(client, named).run_id)[1]
        summary = shown["summary"]
        proportion = Proportion(summary["passed"], summary["assessed"])
        proportions.append(proportion)
        rows.append(
            {
                "run_id": shown["run_id"],
                "status": shown["status"],
                "dataset": shown["dataset"],
                "model": shown["actor_model"],
                "attempts": summary["attempts"],
                "assessed": summary["assessed"],
                "passed": summary["passed"],
                "platform_errors": summary["platform_errors"],
                "task_errors": summary["task_errors"],
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
