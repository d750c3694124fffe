"""An unexpected exception in a worker call: the client gets a plain server error, the
server's log names the exception."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from proxy.worker_calls import WorkerConfig
from proxy.worker_messages import CallRecord
from proxy.workers import CallWorkers
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.call_identity import CallIdentity
from synth_pipelines.rendering.model_registry import ModelRegistry, TinkerRoute

RECORD = CallRecord(
    token_id="t-1",
    identity=CallIdentity(
        call_id="never-prepared",
        run_id="r-1",
        batch=None,
        attempt_id="r-1.a-1",
        trial_id=None,
        owner="someone",
        role="actor",
        agent_id="main",
        parent_agent_id=None,
        agent_type=None,
        native_session_id=None,
    ),
    sampling_seed=None,
    sampling_temperature=None,
    received=0.0,
)


def test_a_crashed_call_is_a_server_error_whose_exception_the_server_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    async def scenario() -> ApiError:
        workers = CallWorkers(
            WorkerConfig(
                registry_json=ModelRegistry().to_json(),
                database_url=f"sqlite:///{tmp_path / 'control.db'}",
                spool_dir=tmp_path / "spool",
                model_service_url="http://127.0.0.1:9",
                model_service_key="tml-unused",
                backend_timeout_sec=5.0,
            ),
            1,
        )
        await workers.start()
        try:
            # Completing a call that was never prepared is a bug on the server's side.
            with pytest.raises(ApiError) as caught:
                await workers.complete(0, "never-prepared", TinkerRoute(base_model="m"), RECORD)
            return caught.value
        finally:
            await workers.shutdown()

    with caplog.at_level(logging.ERROR, logger="synth.proxy.workers"):
        error = asyncio.run(scenario())

    assert (error.error_type, error.message) == ("api_error", "internal error in proxy worker 0")
    assert "KeyError" not in error.message
    assert any(
        "proxy worker 0 failed: KeyError: 'never-prepared'" in record.getMessage()
        for record in caplog.records
    )
