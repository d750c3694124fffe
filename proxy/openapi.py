"""The proxy's OpenAPI document: the Messages endpoints described as they really validate.

Those endpoints read their body undecoded (a worker process parses it), so FastAPI cannot
see the request models; the operations name them here, and every error status they answer
with is documented in Anthropic's error shape.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from synth_pipelines.contracts.api_errors import ErrorResponse

_REF = "#/components/schemas/{model}"

_ERRORS: dict[int, str] = {
    400: "invalid_request_error: the body is not a valid request; the message names the field",
    401: "authentication_error: no scoped token, or one that is invalid or expired",
    403: "permission_error: the token may not use this model or endpoint",
    404: "not_found_error: the model is not served here",
    413: "request_too_large: the body is over the token's limit (16 bytes per token of its "
    "model's context, at least 1 MiB, at most 32 MiB)",
    429: "rate_limit_error: the token has had its limit of tokens tokenized this minute "
    "(64 of its model's context windows); `retry-after` says when to retry",
    500: "api_error: the model service failed this call",
    529: "overloaded_error: the model service is overloaded",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """FastAPI's `responses=` for the listed statuses, each in Anthropic's error shape."""
    return {status: {"model": ErrorResponse, "description": _ERRORS[status]} for status in statuses}


def json_request_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` naming `model` as the operation's required JSON body."""
    schema = {"$ref": _REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def install_openapi(app: FastAPI, request_models: list[type[BaseModel]]) -> None:
    """Serve `app`'s generated document with `request_models` (and what they use) in it."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            # FastAPI documents its own 422; this app answers those refusals as Anthropic's 400.
            for operation in _operations(document):
                operation["responses"].pop("422", None)
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
            for model in request_models:
                schema = model.model_json_schema(ref_template=_REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[model.__name__] = schema
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [operation for path in document.get("paths", {}).values() for operation in path.values()]
