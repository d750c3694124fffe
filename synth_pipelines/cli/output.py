"""How every command prints: a human view, or `--json`; errors as one line, exit 2."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from synth_pipelines.contracts.validation_errors import describe_validation_error
from synth_pipelines.submission.errors import SubmissionError

console = Console()
errors = Console(stderr=True)

_json_output = ContextVar("json_output", default=False)


def _choose_json(chosen: bool) -> bool:
    _json_output.set(chosen)
    return chosen


JSON_OPTION = typer.Option(
    False, "--json", help="Print machine-readable JSON.", callback=_choose_json
)
JSON_LINES_OPTION = typer.Option(
    False, "--json", help="One JSON object per line.", callback=_choose_json
)

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT = 0, 1, 2

# C0 controls but newline and tab, DEL, C1 controls, and the bidirectional overrides and
# isolates (text that reads in one order and is stored in another).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """Text an agent or a task chose, made safe to print through Rich: every control
    character written as a visible `\\xNN` / `\\uNNNN` escape (no escape sequence, carriage
    return or bell reaches the terminal) and Rich markup escaped (a `[/]` prints as itself)."""

    def visible(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return escape(_UNPRINTABLE.sub(visible, text))


class UserError(Exception):
    """Something the operator asked for that cannot be done; the message says why."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line on stderr; with `--json`, the `error` document on stdout as well."""
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    if _json_output.get():
        _write_document("error", {"error": message, "exit_code": code})
    raise typer.Exit(code)


@contextmanager
def user_errors(*expected: type[Exception]) -> Iterator[None]:
    """Turn the listed exceptions into a one-line error and exit code 2."""
    refused: tuple[type[Exception], ...] = (UserError, SubmissionError, *expected)
    try:
        yield
    except ValidationError as error:
        fail(f"{error.title}: {describe_validation_error(error)}")
    except refused as error:
        fail(str(error))


def emit(command: str, data: Any, as_json: bool, render: Callable[[], None]) -> None:
    """Print `data` as the command's documented JSON document, or render it for people."""
    if as_json:
        _write_document(command, data)
    else:
        render()


def document_text(command: str, data: Any) -> str:
    """The command's documented JSON document, checked against its schema, as printed."""
    # Every document model is built when this module is imported: only JSON output pays.
    from synth_pipelines.contracts.documents import printed

    return printed(command, data)


def _write_document(command: str, data: Any) -> None:
    sys.stdout.write(document_text(command, data))


def folding_table(*headers: str, show_lines: bool = False) -> Table:
    """A table whose cells wrap instead of being cut: every id in it can be copied whole."""
    table = Table(*headers, show_lines=show_lines)
    for column in table.columns:
        column.overflow = "fold"
    return table
