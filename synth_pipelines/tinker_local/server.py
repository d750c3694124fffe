"""Running the service under uvicorn, in the foreground or on a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

STARTUP_TIMEOUT_SECONDS = 60.0


@contextmanager
def serving(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    extra_sockets: Sequence[socket.socket] = (),
) -> Iterator[str]:
    """Serve `app` on a background thread and yield its base URL (port 0: a free port),
    and on `extra_sockets` (listening already) too.

    For tests and embedding: point `TINKER_BASE_URL` (or `ServiceClient(base_url=...)`)
    at the yielded URL.
    """
    listener = socket.create_server((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(
        target=server.run,
        kwargs={"sockets": [listener, *extra_sockets]},
        name="tinker-local-http",
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the model service did not start on {host}:{port}")
        time.sleep(0.02)
    bound_port = listener.getsockname()[1]
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join()
