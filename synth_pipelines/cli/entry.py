"""The `synth` executable: the one read answered at start-up, else the Typer app."""

from __future__ import annotations

import sys


def main() -> None:
    from synth_pipelines.cli.run_show_fast import answered

    code = answered(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from synth_pipelines.cli.main import app

    app()
