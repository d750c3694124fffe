"""The scripted local model service as its own process, able to hold one training step.

Run as `python -m tests.held_model_service --port PORT --journal FILE [--hold STEP]`.
Every training request that reaches the service is appended to the journal, so a test
counts what reached any incarnation of the service across kills. With `--hold`, the
first request of that step gets no answer until the process dies, which parks the caller
exactly at the step while the test kills a process. `sampler_saved` holds the result of
the sampler save instead: the weights are in the object store but the caller never
learns their path.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request

from synth_pipelines.config import Settings
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.checkpoints import KEY_PREFIX
from tests.live_services import MODEL

TRAINING_PATHS = (
    "/create_model",
    "/forward_backward",
    "/optim_step",
    "/save_weights",
    "/save_weights_for_sampler",
    "/load_weights",
)
HOLDS = ("forward_backward", "optim_step", "save_weights_for_sampler", "sampler_saved")


def _journal(journal: Path, line: str) -> None:
    with journal.open("a") as sink:
        sink.write(f"{os.getpid()} {line}\n")


def _sampler_weights_stored() -> bool:
    store = open_object_store(Settings().objects_url)
    return any("/sampler_weights/" in key for key in store.list(KEY_PREFIX))


def hold_one_step(app: FastAPI, journal: Path, hold: str | None) -> None:
    held: list[str] = []

    @app.middleware("http")
    async def journal_and_hold(request: Request, call_next):
        path = request.url.path.removeprefix("/api/v1")
        if path in TRAINING_PATHS:
            _journal(journal, f"request {path.lstrip('/')}")
        if hold and not held and path == f"/{hold}":
            held.append(path)
            _journal(journal, f"held {hold}")
            await asyncio.Event().wait()
        response = await call_next(request)
        saved = hold == "sampler_saved" and path == "/retrieve_future"
        if saved and not held and _sampler_weights_stored():
            held.append(path)
            _journal(journal, f"held {hold}")
            await asyncio.Event().wait()
        return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--hold", choices=HOLDS)
    args = parser.parse_args()
    app = create_app(MODEL, scripted=True, object_store_url=Settings().objects_url)
    hold_one_step(app, args.journal, args.hold)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
