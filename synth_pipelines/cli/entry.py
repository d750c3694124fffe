"""The `synth` executable: the one read answered at start-up, else the Typer app."""

from __future__ import annotations

import os
import sys

from synth_pipelines.state_locations import OWNER_ONLY_UMASK


def main() -> None:
    # Whatever this process and the services it starts write (the control database, the
    # objects, the spool, logs) is its owner's alone, whatever the operator's shell has.
    os.umask(OWNER_ONLY_UMASK)
    from synth_pipelines.cli.run_show_fast import answered

    code = answered(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from synth_pipelines.cli.main import app

    app()
