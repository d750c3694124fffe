"""The root command group: failures of the control path reported as one line, not a traceback.

Any command may open the control database first thing; in production that is PostgreSQL
with password authentication, so a missing or wrong password, or a server that is down,
is an operator's setting to fix, not a crash.
"""

from __future__ import annotations

import signal
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


def interrupts_by_default() -> None:
    """A command started as a background job of a script (`synth up &`) inherits SIGINT
    ignored, and so would every service it starts; Dagster's processes give SIGTERM the
    handler SIGINT has, so they would ignore `synth down` as well."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class SynthGroup(TyperGroup):
    def invoke(self, ctx: typer.Context) -> Any:
        interrupts_by_default()
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
