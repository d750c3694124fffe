"""How every command prints: a human view, or `--json`; errors as one line, exit 2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console

console = Console()
errors = Console(stderr=True)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class UserError(Exception):
    """Something the operator asked for that cannot be done; the message says why."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def describe_validation_error(error: ValidationError) -> str:
    """The first problem, where it is, and the offending value, on one line."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    given = "" if first["type"] == "missing" else f" (got {repr(first.get('input'))[:80]})"
    more = f"; and {error.error_count() - 1} more problem(s)" if error.error_count() > 1 else ""
    return f"{where}: {first['msg']}{given}{more}"


@contextmanager
def user_errors(*expected: type[Exception]) -> Iterator[None]:
    """Turn the listed exceptions into a one-line error and exit code 2."""
    try:
        yield
    except ValidationError as error:
        fail(f"{error.title}: {describe_validation_error(error)}")
    except (UserError, *expected) as error:
        fail(str(error))


def emit(data: Any, as_json: bool, render: Callable[[], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    else:
        render()
