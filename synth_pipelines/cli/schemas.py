"""`synth schema`: the JSON Schema of each command's `--json` document."""

from __future__ import annotations

import json

import typer

from synth_pipelines.cli.output import fail


def schema_command(
    command: list[str] = typer.Argument(None, help="e.g. `run show`; all commands if omitted."),
) -> None:
    """Print the JSON Schema of a command's --json output (a JSON object)."""
    from synth_pipelines.contracts.documents import DOCUMENTS, schema

    name = " ".join(command or [])
    if name and name not in DOCUMENTS:
        fail(f"no --json document for {name!r}; documented commands: {', '.join(DOCUMENTS)}")
    found = {name: schema(name)} if name else {key: schema(key) for key in DOCUMENTS}
    typer.echo(json.dumps(found, indent=2, sort_keys=True))
