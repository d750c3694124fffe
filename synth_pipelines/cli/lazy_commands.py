"""Top-level commands loaded only when invoked.

Each noun's module imports what its commands need (the control database, Harbor, pyarrow,
polars...). `synth --help` lists every noun and `synth run list` needs only the run
commands, so the root knows each command by name and one-line help and imports its
module on first use: start-up costs what the invoked command needs, not the whole CLI.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:
    # Typer runs on its own copy of click: its groups hold, make and invoke that copy's
    # commands and contexts, which the standalone `click` package's are not.
    from typer._click import Command, Context


@dataclass(frozen=True)
class CommandSource:
    """Where a top-level command lives: `module:attribute`, a Typer app or a function."""

    target: str
    help: str
    context_settings: dict[str, Any] | None = None

    def load(self, name: str) -> Command:
        module_name, attribute = self.target.split(":")
        loaded = getattr(importlib.import_module(module_name), attribute)
        if isinstance(loaded, typer.Typer):
            # A group even when the noun has one command (`synth attempt show`).
            return typer.main.get_group(loaded)
        single = typer.Typer()
        single.command(name, context_settings=self.context_settings)(loaded)
        return typer.main.get_command(single)


class LazyCommand(TyperCommand):
    """Stands for a command in the root's listing; the real one is built when invoked."""

    def __init__(self, name: str, source: CommandSource) -> None:
        super().__init__(name, help=source.help, short_help=source.help)
        self._source = source
        self._real: Command | None = None

    def real(self) -> Command:
        if self._real is None:
            self._real = self._source.load(self.name or "")
        return self._real

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Context | None = None,
        **extra: Any,
    ) -> Context:
        # Click invokes `sub_ctx.command`, so the context made here runs the real command.
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Context) -> Any:
        return self.real().invoke(ctx)
