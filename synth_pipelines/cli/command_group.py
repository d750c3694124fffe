"""The root command group: failures of the control path reported as one line, not a traceback.

Any command may open the control database first thing; in production that is PostgreSQL
with password authentication, so a missing or wrong password, or a server that is down,
is an operator's setting to fix, not a crash.
"""

from __future__ import annotations

from typing import Any

import typer
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from typer.core import TyperGroup

from synth_pipelines.cli.output import fail
from synth_pipelines.config import settings


def _shown_database_url() -> str:
    url = settings().control_database_url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(unparseable SYNTH_DATABASE_URL)"


class SynthGroup(TyperGroup):
    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OperationalError as error:
            said = str(error.orig or error).strip().splitlines()[0]
            fail(
                f"the control database at {_shown_database_url()} refused this command: "
                f"{said}; check SYNTH_DATABASE_URL (user, password, host and port, e.g. "
                "postgresql+psycopg2://USER:PASSWORD@HOST:5432/synth_control) and that the "
                "server is running"
            )
