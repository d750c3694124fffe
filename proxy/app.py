"""The capture proxy: Anthropic Messages in, model-native tokens out, exact evidence staged.

Every call is rendered in the model's native format, sampled through the tinker SDK,
parsed back into Anthropic content blocks, and staged durably with the exact prompt ids,
sampled ids and sampler logprobs before its response completes, all by a worker process
(`proxy.worker_calls`); this process authenticates, streams and publishes the evidence.
The response and the learning record come from the same prepared prompt and sampled output.
"""

from __future__ import annotations

from functools import partial

from fastapi import FastAPI

from proxy.config import ProxyConfig
from proxy.error_handlers import install_error_handlers
from proxy.lifespan import lifespan
from proxy.openapi import install_openapi
from proxy.routes import messages, models, operations
from proxy.sandbox_listener import SandboxListenerGate
from synth_pipelines.contracts.messages import CountTokensRequest, MessagesRequest


def create_app(config: ProxyConfig) -> FastAPI:
    app = FastAPI(title="synth capture proxy", lifespan=partial(lifespan, config=config))
    app.include_router(operations.router)
    app.include_router(models.router)
    app.include_router(messages.router)
    install_error_handlers(app)
    install_openapi(app, [MessagesRequest, CountTokensRequest])
    app.add_middleware(SandboxListenerGate)
    return app
