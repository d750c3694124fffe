"""Every refusal in Anthropic's error shape: the proxy's own, a body FastAPI could not
validate, and Starlette's (no such route, wrong method)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from proxy.state import proxy_state
from synth_pipelines.contracts.api_errors import (
    ApiError,
    ErrorDetail,
    ErrorResponse,
    ErrorType,
    field_path,
)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _proxy_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid_body)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]


async def _proxy_error(request: Request, error: ApiError) -> JSONResponse:
    state = await proxy_state(request)
    await state.record_fault(getattr(request.state, "claims", None), error)
    return _error_response(error)


async def _invalid_body(_request: Request, error: RequestValidationError) -> JSONResponse:
    problem = error.errors()[0]
    detail = f"{field_path(tuple(problem['loc'][1:]))}: {problem['msg']}"
    return _error_response(ApiError("invalid_request_error", detail))


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    message = f"{request.method} {request.url.path}: {error.detail}"
    body = ErrorResponse(
        error=ErrorDetail(type=_http_error_type(error.status_code), message=message)
    )
    return JSONResponse(body.model_dump(), status_code=error.status_code, headers=error.headers)


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(
        error.response().model_dump(), status_code=error.status_code, headers=error.headers
    )


def _http_error_type(status_code: int) -> ErrorType:
    if status_code == 404:
        return "not_found_error"
    if status_code == 413:
        return "request_too_large"
    return "invalid_request_error"
