"""A pydantic validation error, explained to an operator on one line."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(error: ValidationError) -> str:
    """The first problem, where it is, and the offending value, on one line."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    given = "" if first["type"] == "missing" else f" (got {repr(first.get('input'))[:80]})"
    more = f"; and {error.error_count() - 1} more problem(s)" if error.error_count() > 1 else ""
    return f"{where}: {first['msg']}{given}{more}"
