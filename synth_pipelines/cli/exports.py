"""`synth run export`: a run's outcomes, assessments or captured evidence as one table,
Parquet for `pl.read_parquet` or CSV for a spreadsheet. The gateway builds the file and
grants a read of it; its bytes come straight from where it is stored."""

from __future__ import annotations

from pathlib import Path

import typer

from synth_pipelines.cli.gateway_client import GatewayClient, GatewayRefusal
from synth_pipelines.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_RUN_FAILED,
    JSON_OPTION,
    console,
    emit,
    fail,
    user_errors,
)
from synth_pipelines.cli.runs import checked_choice, my_run, run_app
from synth_pipelines.contracts.run_export import FILE_FORMATS, TABLE_NAMES, RunExport

SERVER_ERROR = 500
"""The gateway's answer when the run's evidence fails its integrity check: the run's
data, not the request, is at fault (exit 1, as for a failed run)."""


@run_app.command("export")
def export(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="The run, by its id or a unique prefix of it."),
    what: str = typer.Option(..., "--what", help=f"Which table: {', '.join(TABLE_NAMES)}."),
    file_format: str = typer.Option("parquet", "--format", help=f"{' or '.join(FILE_FORMATS)}."),
    out: Path | None = typer.Option(
        None, "--out", help="The file to write; default RUN-WHAT.FORMAT here."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """One of a run's tables as a file: `pl.read_parquet(path)` opens it. Evidence has a
    row per captured model call with its token ids and logprobs as lists (JSON in CSV). A
    CSV text cell that a spreadsheet would run as a formula is prefixed with `'`."""
    checked_choice(what, "--what", TABLE_NAMES)
    checked_choice(file_format, "--format", FILE_FORMATS)
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    out = out or Path(f"{run_id}-{what}.{file_format}")
    if not out.parent.is_dir():
        fail(f"--out {out}: directory {out.parent} does not exist")
    if out.is_dir():
        fail(f"--out {out} is a directory; name the file to write")
    try:
        answer = client.request(
            "POST", f"/v1/runs/{run_id}/exports", json={"what": what, "format": file_format}
        )
    except GatewayRefusal as refused:
        fail(str(refused), EXIT_RUN_FAILED if refused.status == SERVER_ERROR else EXIT_BAD_INPUT)
    exported = RunExport.model_validate(answer)
    with user_errors():
        client.download(exported.download, out)
    data = {**exported.model_dump(exclude={"download"}), "path": str(out.resolve())}
    emit(
        "run export",
        data,
        as_json,
        lambda: console.print(
            f"wrote {data['rows']} {what} row(s) of {run_id} to {data['path']}",
            highlight=False,
            soft_wrap=True,
        ),
    )
