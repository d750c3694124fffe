"""`synth train resolve`: an operator's decision about an unresolved policy update."""

from __future__ import annotations

import typer
from pydantic import TypeAdapter

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, fail, user_errors
from synth_pipelines.cli.progress import WAIT_HELP
from synth_pipelines.cli.runs import my_run
from synth_pipelines.contracts.policy_update import PolicyUpdate

train_app = typer.Typer(help="Train a model from task experience.", no_args_is_help=True)


@train_app.command("resolve")
def resolve_update(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    inspect: bool = typer.Option(False, "--inspect", help="Show the unresolved update only."),
    discard: bool = typer.Option(
        False,
        "--discard",
        help="It was not applied (or is lost): redo it from the last checkpoint.",
    ),
    applied: str | None = typer.Option(
        None, "--applied", help="It was applied; the trainer state saved after it is this path."
    ),
    note: str = typer.Option("", "--note", help="Why; kept with the resolution."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Resolve the update a run stopped at; then `synth run resume` continues the run."""
    if sum((inspect, discard, applied is not None)) != 1:
        fail("give exactly one of --inspect, --discard or --applied STATE_PATH")
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    path = f"/v1/runs/{run_id}"
    with user_errors():
        if inspect:
            pending = TypeAdapter(list[PolicyUpdate]).validate_python(
                client.request("GET", f"{path}/unresolved")
            )
            emit(
                "train resolve --inspect",
                pending,
                as_json,
                lambda: console.print(
                    "\n".join(
                        f"{u.batch}: unresolved since {u.marked_at.isoformat()}, {u.datums} datums"
                        for u in pending
                    )
                    or f"{run_id} has no unresolved update"
                ),
            )
            return
        decided = PolicyUpdate.model_validate(
            client.request(
                "POST", f"{path}/resolution", json={"applied_state": applied, "note": note}
            )
        )
    emit(
        "train resolve",
        decided,
        as_json,
        lambda: console.print(
            f"{decided.batch}: {decided.resolution}; continue with `synth run resume {run_id}`"
        ),
    )


@train_app.command("start")
def start(
    ctx: typer.Context,
    dataset: str = typer.Option(..., "--dataset", help="Dataset version, org/name@version."),
    actor: str = typer.Option(..., "--actor", help="Actor profile (@file, JSON or org/name@v)."),
    plan: str = typer.Option(
        ..., "--plan", help="A train or warm_start plan: @file.json or inline JSON."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Start from this base model or checkpoint; the plan's continue_optimizer decides "
        "whether a checkpoint's optimizer state continues",
    ),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key"),
    wait: bool = typer.Option(False, "--wait", help=WAIT_HELP),
    as_json: bool = JSON_OPTION,
) -> None:
    """Accept a training run: a `train` plan (batches of sampling groups, an update and a
    checkpoint each) or a `warm_start` plan (supervised steps on the tasks' demonstrations,
    one checkpoint)."""
    from synth_pipelines.cli.runs import start_run
    from synth_pipelines.submission.run_requests import Submission

    start_run(
        ctx.obj,
        Submission(
            dataset=dataset, actor=actor, plan=plan, model=model, kinds=("train", "warm_start")
        ),
        idempotency_key,
        wait=wait,
        as_json=as_json,
    )
