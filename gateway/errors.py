"""Every refusal in one shape, `{"type": "error", "error": {"type", "message"}}` (the
proxy's), with a one-line message: the gateway's own, a body that does not validate
(422, naming the field), and Starlette's (no such route, wrong method)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from synth_pipelines.contracts.api_errors import (
    ApiError,
    ErrorDetail,
    ErrorResponse,
    ErrorType,
    field_path,
)

UNPROCESSABLE = 422


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]


def error_response(error_type: ErrorType, message: str, status_code: int) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(type=error_type, message=" ".join(message.split())))
    return JSONResponse(body.model_dump(), status_code=status_code)


async def _refused(_request: Request, error: ApiError) -> JSONResponse:
    response = error_response(error.error_type, error.message, error.status_code)
    response.headers.update(error.headers)
    return response


async def _invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
    problems = error.errors()
    first = problems[0]
    where = field_path(tuple(first["loc"]))
    message = f"{where}: {first['msg']}"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more)"
    return error_response("invalid_request_error", message, UNPROCESSABLE)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    error_type: ErrorType = "invalid_request_error"
    message = f"{request.method} {request.url.path}: {error.detail}"
    if error.status_code == 404:
        error_type = "not_found_error"
    response = error_response(error_type, message, error.status_code)
    if error.headers:
        response.headers.update(error.headers)
    return response
