"""The proxy's listener for sandboxes: a Unix socket that serves only the model routes.

An agent reaches the proxy only through its sandbox's route (`sandbox/route.py`), which
connects to this socket rather than to the proxy's TCP address. Requests that arrive
here may call what a harness needs (`/v1/messages`, `/v1/messages/count_tokens`,
`/v1/models`) and nothing else: the metrics, the OpenAPI document and its pages, health
and the operator endpoints answer 404, in Anthropic's error shape, and stay on the TCP
listener, which operators reach on the host. Before, `/metrics`, `/openapi.json` and
`/docs` answered through the route without a token, with platform-wide counters.

The socket sits in the proxy's state directory, mode 0600: only the host's root (the
controller that opens routes) can connect to it. One proxy owns it at a time: a lock
beside it is held while the proxy serves (`storage/pid_lock.py`), so a second proxy
started against the same state directory (on its own port) refuses to start instead of
replacing the socket every running sandbox's route connects to; a killed proxy's lock
goes with its process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from synth_pipelines.contracts.api_errors import ErrorDetail, ErrorResponse
from synth_pipelines.storage.pid_lock import pid_lock

MODEL_ROUTES = ("/v1/messages", "/v1/messages/count_tokens", "/v1/models")
# A Unix socket path must fit `sockaddr_un.sun_path`.
MAX_SOCKET_PATH = 107


class SandboxSocketTakenError(RuntimeError):
    """Another running proxy serves sandboxes at this path."""


def _owned(path: Path) -> AbstractContextManager[None]:
    """Hold the lock that says which proxy serves sandboxes at `path` (the proxy's forked
    workers do not inherit it, and it ends with the process)."""

    def taken(holder: str) -> SandboxSocketTakenError:
        return SandboxSocketTakenError(
            f"a capture proxy (pid {holder}) already serves sandboxes at {path}; stop it "
            "first (`synth down`), or give this one its own SYNTH_DATA_DIR"
        )

    return pid_lock(path.with_name(f"{path.name}.lock"), taken)


@contextmanager
def sandbox_socket(path: Path) -> Iterator[socket.socket]:
    """A listening Unix socket at `path` (replacing one a killed proxy left), removed
    again when the proxy is done with it; refused while another proxy serves there."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ValueError(
            f"the proxy's sandbox socket path {path} is longer than {MAX_SOCKET_PATH} bytes; "
            "set SYNTH_DATA_DIR to a shorter directory"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with _owned(path), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        path.unlink(missing_ok=True)
        listener.bind(str(path))
        path.chmod(0o600)
        listener.listen(128)
        try:
            yield listener
        finally:
            path.unlink(missing_ok=True)


def _model_route(path: str) -> bool:
    return path in MODEL_ROUTES or path.startswith("/v1/models/")


class SandboxListenerGate:
    """Refuse all but the model routes to requests that came through the Unix socket.

    Under ASGI a request's `server` is its listener's (host, port), or (path, None) for a
    Unix socket, or None when the server does not know: only a TCP listener has a port.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server") if scope["type"] == "http" else ("", 0)
        from_sandbox = server is None or server[1] is None
        if not from_sandbox or _model_route(scope["path"]):
            await self.app(scope, receive, send)
            return
        body = ErrorResponse(
            error=ErrorDetail(
                type="not_found_error",
                message=(
                    f"{scope['method']} {scope['path']} is not served to sandboxes, only the "
                    "model routes are; operators reach it on the proxy's own address"
                ),
            )
        ).model_dump_json()
        await send(
            {
                "type": "http.response.start",
                "status": 404,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})
