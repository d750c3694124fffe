"""`synth checkpoint list|show`: a checkpoint's lineage, from its producing batch to the
runs that sampled through it since."""

from __future__ import annotations

from urllib.parse import quote

import typer
from pydantic import TypeAdapter
from rich.table import Table

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, user_errors
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.checkpoint_lineage import CheckpointLineage

checkpoint_app = typer.Typer(
    help="Checkpoints: what produced each one, and what sampled through it since.",
    no_args_is_help=True,
)


def _whole_ids_table(*columns: str) -> Table:
    """Ids fold onto more lines rather than being cut: a cut id cannot be pasted back."""
    table = Table(*columns)
    for column in table.columns:
        column.overflow = "fold"
    return table


@checkpoint_app.command("list")
def list_checkpoints(
    ctx: typer.Context,
    run_id: str | None = typer.Option(None, "--run", help="Only the checkpoints of this run."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Your checkpoints, oldest first; the id is what `--model` and `checkpoint show` take."""
    client = GatewayClient(ctx.obj)
    only = {} if run_id is None else {"run": run_id}
    with user_errors():
        found = TypeAdapter(list[Checkpoint]).validate_python(
            client.request("GET", "/v1/checkpoints", params=only)
        )

    def render() -> None:
        table = _whole_ids_table("id", "run / batch", "steps", "base model", "created")
        for checkpoint in found:
            table.add_row(
                checkpoint.sampler_path,
                checkpoint.batch,
                str(checkpoint.optimizer_steps),
                checkpoint.base_model,
                f"{checkpoint.created_at:%Y-%m-%d %H:%M:%S}",
            )
        console.print(table)

    emit("checkpoint list", found, as_json, render)


def _render(lineage: CheckpointLineage) -> None:
    checkpoint, update = lineage.checkpoint, lineage.update
    console.print(f"[bold]{checkpoint.sampler_path}[/]", soft_wrap=True)
    console.print(
        f"produced by run {checkpoint.run_id}, batch {checkpoint.batch} "
        f"(update {update.status if update else 'not recorded'}, "
        f"{update.datums if update else 0} datums); base model {checkpoint.base_model}; "
        f"{checkpoint.optimizer_steps} optimizer steps; dataset cursor {checkpoint.dataset_cursor}"
    )
    console.print(f"trainer state {checkpoint.state_path}", soft_wrap=True)
    selected = _whole_ids_table("run", "kind", "status", "as --model", "policy of batches")
    for selection in lineage.selected_by:
        selected.add_row(
            selection.run_id,
            selection.kind,
            selection.status,
            "yes" if selection.as_model else "no",
            ", ".join(selection.policy_batches) or "-",
        )
    console.print("selected by" if lineage.selected_by else "selected by no run yet")
    if lineage.selected_by:
        console.print(selected)
    groups = _whole_ids_table("batch", "group", "task", "attempts", "mean reward", "qualified")
    for group in lineage.groups:
        qualified = "-" if group.qualified is None else "yes" if group.qualified else "no"
        groups.add_row(
            group.batch,
            str(group.group_index),
            group.task_name,
            str(group.attempts),
            "-" if group.mean_reward is None else f"{group.mean_reward:.2f}",
            f"{qualified} ({group.exclusion})" if group.exclusion else qualified,
        )
    console.print(f"sampling groups recorded against it: {len(lineage.groups)}")
    if lineage.groups:
        console.print(groups)


@checkpoint_app.command("show")
def show(
    ctx: typer.Context,
    checkpoint_id: str = typer.Argument(
        ..., metavar="CKPT", help="The checkpoint's tinker:// path, or a unique prefix or suffix."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """One checkpoint: its producing run and batch, base model and optimizer steps, the
    sampling groups recorded against it, and every run that selected it."""
    client = GatewayClient(ctx.obj)
    with user_errors():
        lineage = CheckpointLineage.model_validate(
            client.request("GET", f"/v1/checkpoints/{quote(checkpoint_id, safe='')}")
        )
    emit("checkpoint show", lineage, as_json, lambda: _render(lineage))
