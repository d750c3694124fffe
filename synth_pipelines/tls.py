"""One TLS client context per process, for every HTTP call the platform makes to its own
services (capture proxy, model service, Dagster webserver).

httpx builds an SSL context for each client it creates, `httpx.get` included, and building
one loads the whole CA bundle: about 30 ms of CPU each time. A run worker made two such
calls per attempt (the model's limits, the evidence flush), which was a quarter of its CPU.
Pass `verify=client_context()` instead: the same trust httpx would build (`SSL_CERT_FILE`,
`SSL_CERT_DIR`, else certifi's bundle), built once.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_context() -> ssl.SSLContext:
    """httpx's default verifying context, shared (an `SSLContext` is safe to share
    between threads once configured)."""
    return httpx.create_ssl_context()
