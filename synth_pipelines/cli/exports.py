"""`synth run export`: a run's outcomes, assessments or captured evidence as one table,
Parquet for `pl.read_parquet` or CSV for a spreadsheet."""

from __future__ import annotations

from pathlib import Path

import typer

from synth_pipelines.cli.output import EXIT_RUN_FAILED, JSON_OPTION, console, emit, fail
from synth_pipelines.cli.runs import checked_choice, my_run, run_app
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.storage.objectstore import configured_object_store

WHAT = ("outcomes", "assessments", "evidence")
FORMATS = ("parquet", "csv")


@run_app.command("export")
def export(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="The run, by its id or a unique prefix of it."),
    what: str = typer.Option(..., "--what", help=f"Which table: {', '.join(WHAT)}."),
    file_format: str = typer.Option("parquet", "--format", help=f"{' or '.join(FORMATS)}."),
    out: Path | None = typer.Option(
        None, "--out", help="The file to write; default RUN-WHAT.FORMAT here."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """One of a run's tables as a file: `pl.read_parquet(path)` opens it. Evidence has a
    row per captured model call with its token ids and logprobs as lists (JSON in CSV). A
    CSV text cell that a spreadsheet would run as a formula is prefixed with `'`."""
    checked_choice(what, "--what", WHAT)
    checked_choice(file_format, "--format", FORMATS)
    config: Settings = ctx.obj
    engine = control_engine(config)
    run = my_run(engine, run_id, config.owner)
    out = out or Path(f"{run.run_id}-{what}.{file_format}")
    if not out.parent.is_dir():
        fail(f"--out {out}: directory {out.parent} does not exist")
    if out.is_dir():
        fail(f"--out {out} is a directory; name the file to write")
    store = configured_object_store(config)
    from synth_pipelines.runtime.run_tables import READERS, EvidenceUnreadableError, write_table

    try:
        table = READERS[what](engine, store, run)
    except EvidenceUnreadableError as error:
        fail(str(error), code=EXIT_RUN_FAILED)
    write_table(table, out, file_format)
    data = {
        "run_id": run.run_id,
        "what": what,
        "format": file_format,
        "path": str(out.resolve()),
        "rows": table.num_rows,
        "columns": table.column_names,
    }
    emit(
        "run export",
        data,
        as_json,
        lambda: console.print(
            f"wrote {data['rows']} {what} row(s) of {run.run_id} to {data['path']}",
            highlight=False,
            soft_wrap=True,
        ),
    )
