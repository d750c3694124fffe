"""The root command group: the settings read once for the invoked command (its context's
`obj`), the state directory kept its owner's (`state_locations.keep_private`), and failures
of the control path reported as one line, not a traceback.

Any command may open the control database first thing; in production that is PostgreSQL
with password authentication, so a missing or wrong password, or a server that is down,
is an operator's setting to fix, not a crash.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from typer.core import TyperGroup

from synth_pipelines.cli.lazy_commands import CommandSource, LazyCommand
from synth_pipelines.cli.output import UserError, fail
from synth_pipelines.config import Settings, settings
from synth_pipelines.state_locations import keep_private

if TYPE_CHECKING:
    from typer._click import Command, Context


def _shown_database_url(config: Settings) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    url = config.control_database_url
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


def _is_database_refusal(error: Exception) -> bool:
    exc = sys.modules.get("sqlalchemy.exc")
    return exc is not None and isinstance(error, exc.OperationalError)


class SynthGroup(TyperGroup):
    commands_by_name: ClassVar[dict[str, CommandSource]] = {}
    """The top-level commands, each loaded from its module when invoked."""

    def list_commands(self, ctx: Context) -> list[str]:
        return [*super().list_commands(ctx), *self.commands_by_name]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        source = self.commands_by_name.get(cmd_name)
        if source is None:
            return super().get_command(ctx, cmd_name)
        return LazyCommand(cmd_name, source)

    def invoke(self, ctx: Context) -> Any:
        interrupts_by_default()
        # Every command's context inherits this `obj`: the command reads it (`ctx.obj`)
        # instead of the environment.
        ctx.obj = config = settings()
        try:
            keep_private(config.state_dir)
        except OSError as error:
            fail(
                f"cannot keep the state directory {config.state_dir} to its owner: "
                f"{error.strerror}; set SYNTH_DATA_DIR to a directory this user may write"
            )
        try:
            return super().invoke(ctx)
        except UserError as error:
            # A refusal (the gateway's, or this command's) raised outside `user_errors`.
            fail(str(error))
        except Exception as error:
            # SQLAlchemy is imported by the commands that use the database, not for every
            # command: only one that raised can have raised its error.
            if not _is_database_refusal(error):
                raise
            said = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
            fail(
                f"the control database at {_shown_database_url(config)} refused this command: "
                f"{said}; check SYNTH_DATABASE_URL (user, password, host and port, e.g. "
                "postgresql+psycopg2://USER:PASSWORD@HOST:5432/synth_control) and that the "
                "server is running"
            )
