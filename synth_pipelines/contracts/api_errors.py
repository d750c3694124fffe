"""Anthropic's error shape, and the one exception the proxy raises for a client's mistake.

Every failure a client can cause ends as `{"type": "error", "error": {"type": ..., "message": ...}}`
with the status code Anthropic uses for that error type; a pydantic `ValidationError` on a
request body becomes an `invalid_request_error` that names the offending field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ValidationError

ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "conflict_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
]

STATUS_BY_ERROR_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "conflict_error": 409,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class ErrorDetail(BaseModel):
    type: ErrorType
    message: str


class ErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    error: ErrorDetail


class ApiError(Exception):
    """A request the proxy refuses, carried up to the HTTP layer as Anthropic's error body."""

    def __init__(
        self,
        error_type: ErrorType,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        callers_choice: bool = False,
    ) -> None:
        super().__init__(message)
        self.error_type: ErrorType = error_type
        self.message = message
        self.headers = headers or {}
        """Response headers that go with the refusal (`retry-after` for a 429)."""
        self.callers_choice = callers_choice
        """The refusal of something only the caller chose to ask for (a model outside its
        token's scope): never a platform fault, whatever its status."""

    @property
    def status_code(self) -> int:
        return STATUS_BY_ERROR_TYPE[self.error_type]

    def response(self) -> ErrorResponse:
        return ErrorResponse(error=ErrorDetail(type=self.error_type, message=self.message))


def invalid_request(message: str) -> ApiError:
    return ApiError("invalid_request_error", message)


def field_path(loc: tuple[int | str, ...]) -> str:
    """`("messages", 0, "content", 1, "text")` -> `messages.0.content.1.text`, Anthropic's spelling.

    Pydantic puts the chosen member of a tagged union into `loc` (the block type after a list
    index, the `thinking` / `tool_choice` type, `"function-after[...]"`); those are not fields
    the client wrote, so they are dropped.
    """
    parts: list[str] = []
    for position, part in enumerate(loc):
        previous = loc[position - 1] if position else None
        has_next = position + 1 < len(loc)
        is_union_member = isinstance(part, str) and (
            any(mark in part for mark in "[(")
            or part == "unsupported"
            or (isinstance(previous, int) and part in _BLOCK_TAGS and has_next)
            or (previous in _UNION_FIELDS and part in _UNION_TAGS)
        )
        if not is_union_member:
            parts.append(str(part))
    return ".".join(parts)


def validation_error_response(exc: ValidationError) -> ErrorResponse:
    """The first problem in `exc`, said the way Anthropic says it, plus how many more there are."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    message = _describe(first)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ErrorResponse(error=ErrorDetail(type="invalid_request_error", message=message))


def validation_error(exc: ValidationError) -> ApiError:
    return ApiError("invalid_request_error", validation_error_response(exc).error.message)


def _describe(error: Any) -> str:
    path = field_path(tuple(error["loc"]))
    kind = error["type"]
    if kind == "extra_forbidden":
        return (
            f"{path}: Extra inputs are not permitted. This proxy accepts the documented "
            "Anthropic Messages fields only; remove the field or check its spelling."
        )
    if kind == "missing":
        return f"{path}: Field required"
    if kind == "json_invalid":
        return f"request body is not valid JSON: {error['msg']}"
    message = error["msg"]
    value = error.get("input")
    if isinstance(value, str | int | float | bool) and kind not in _SELF_DESCRIBING:
        message += f" (got {value!r})"
    return f"{path}: {message}" if path else message


# Error kinds whose message already quotes the offending value.
_SELF_DESCRIBING = {"union_tag_invalid", "unsupported_content", "unsupported_field"}

# The `type` tags of content blocks and of the tagged unions in a request.
_BLOCK_TAGS = {
    "text",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "tool_reference",
}
_UNION_FIELDS = {"thinking", "tool_choice"}
_UNION_TAGS = {"enabled", "disabled", "adaptive", "auto", "none", "any", "tool"}
