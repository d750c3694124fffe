"""An attempt's token is refused once the attempt has ended, and a call of an ended
attempt never becomes evidence, not even one that was in flight when it ended.

Before, the token lived `timeout + 600 s` (4200 s for a 300 s task) and nothing revoked
it: written into the trial's artifacts, it sampled and recorded evidence for the
ended attempt 11 s after the run."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.control.token_revocations import revoke_token
from synth_pipelines.credentials import load_signing_key, verify_token
from tests.live_services import MODEL, capture_proxy, model_service, set_script

pytestmark = pytest.mark.slow

BODY = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def revoke(token: str, reason: str) -> None:
    claims = verify_token(load_signing_key(Settings().signing_key_path), token)
    revoke_token(control_engine(Settings()), claims, reason)


def evidence_of(attempt: str) -> list[str]:
    with control_engine(Settings()).connect() as conn:
        return list(
            conn.execute(
                select(evidence_calls.c.call_id).where(evidence_calls.c.attempt_id == attempt)
            ).scalars()
        )


def call(proxy_url: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{proxy_url}/v1/messages", json=BODY, headers={"x-api-key": token}, timeout=60
    )


def held_sampling(entered: threading.Event, release: threading.Event):
    """A model service whose sampling waits until the test releases it."""

    def hook(app) -> None:
        @app.middleware("http")
        async def hold(request, call_next):
            if request.url.path.endswith("/asample"):
                entered.set()
                await asyncio.to_thread(release.wait, 60)
            return await call_next(request)

    return hook


def test_a_revoked_token_is_refused_with_401_naming_why(state):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        token = proxy.token(attempt="a-ended")
        before = call(proxy.url, token)
        revoke(token, "attempt a-ended has ended")
        # Every call after the revocation is refused: by the worker's check at first, and
        # at authentication once the proxy's copy of the table has caught up (0.5 s).
        deadline = time.monotonic() + 10
        while True:
            after = call(proxy.url, token)
            assert after.status_code == 401, after.text
            if "in flight" not in after.json()["error"]["message"]:
                break
            assert time.monotonic() < deadline, "authentication never saw the revocation"
            time.sleep(0.1)
        proxy.flush()
    assert before.status_code == 200
    error = after.json()["error"]
    assert error["type"] == "authentication_error"
    assert "revoked (attempt a-ended has ended)" in error["message"]
    assert len(evidence_of("a-ended")) == 1  # only the call made before the end


def test_a_proxy_started_after_a_revocation_refuses_the_token(state):
    """The proxy reads the revocations recorded before it started."""
    with model_service() as model_url:
        with capture_proxy(model_url) as proxy:
            token = proxy.token(attempt="a-earlier")
        revoke(token, "attempt a-earlier has ended")
        with capture_proxy(model_url) as restarted:
            refused = httpx.get(f"{restarted.url}/v1/models", headers={"x-api-key": token})
    assert refused.status_code == 401
    assert "revoked (attempt a-earlier has ended)" in refused.json()["error"]["message"]


def test_a_call_in_flight_when_its_attempt_ends_records_no_evidence(state):
    entered, release = threading.Event(), threading.Event()
    with (
        model_service(app_hook=held_sampling(entered, release)) as model_url,
        capture_proxy(model_url) as proxy,
        ThreadPoolExecutor(1) as pool,
    ):
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        token = proxy.token(attempt="a-ending")
        in_flight = pool.submit(call, proxy.url, token)
        assert entered.wait(30), "the call never reached the model service"
        revoke(token, "attempt a-ending has ended")
        release.set()
        answer = in_flight.result()
        flushed = proxy.flush()
    assert answer.status_code == 401, answer.text
    assert "while this call was in flight" in answer.json()["error"]["message"]
    assert flushed["pending_calls"] == 0
    assert evidence_of("a-ending") == []
