"""The `synth` command: one Typer app, one sub-app per noun."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="synth",
    help="Run, evaluate and train tool-using coding agents on versioned Harbor datasets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
