"""A ready group learns while another group of the same batch still samples; the batch's one
optimizer step waits for every group.

Group 0's attempts finish at once; group 1's attempts each run a command that sleeps first.
The model service records when each training request reaches it: group 0's
forward_backward must arrive before group 1's last attempt finishes, and the optimizer step
only after every attempt and every forward_backward."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from tests.live_services import platform, set_script
from tests.training_runs import (
    MARKER,
    RIGHT,
    TASKS,
    WRONG,
    accept_training,
    run_batch,
    tool_call,
    training_dataset,
)

SLOW_SEC = 8
PLAN = {
    "groups_per_batch": 2,
    "attempts_per_group": 2,
    "batches": 1,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 4, "cpus": 4, "memory_mb": 4096, "storage_mb": 8192},
}


def recording(arrivals: list[tuple[str, float]]):
    def hook(app) -> None:
        @app.middleware("http")
        async def record(request, call_next):
            path = request.url.path.removeprefix("/api/v1/")
            if path in ("forward_backward", "optim_step"):
                arrivals.append((path, time.time()))
            return await call_next(request)

    return hook


@pytest.mark.slow
def test_a_ready_group_trains_while_another_still_samples(state, tmp_path, monkeypatch):
    arrivals: list[tuple[str, float]] = []
    fast, slow = TASKS
    with platform(monkeypatch, app_hook=recording(arrivals)) as (model_url, _proxy):
        entries = [{"match": "<tool_response>", "completion": "Done.", "repeat": True}]
        for task, pause in ((fast, ""), (slow, f"sleep {SLOW_SEC}; ")):
            first_turn = f"{MARKER[task]}(?!.*<tool_response>)"
            entries.append({"match": first_turn, "completion": tool_call(pause + RIGHT[task])})
            entries.append({"match": first_turn, "completion": tool_call(pause + WRONG[task])})
        set_script(model_url, entries)
        run = accept_training(training_dataset(tmp_path), PLAN)
        result = run_batch(run, 0)
        assert result.success, [e.message for e in result.all_events if e.is_failure]

    finished = {
        event.data["attempt_id"]: event.created_at.astimezone(UTC).timestamp()
        for event in read_events(
            control_engine(Settings()), run_id=run.run_id, kinds=("attempt.finished",)
        )
    }
    tasks = {
        event.data["attempt_id"]: event.data["task"]
        for event in read_events(
            control_engine(Settings()), run_id=run.run_id, kinds=("attempt.finished",)
        )
    }
    slow_done = max(at for attempt, at in finished.items() if tasks[attempt].endswith(slow))
    forwards = [at for path, at in arrivals if path == "forward_backward"]
    (optimizer,) = [at for path, at in arrivals if path == "optim_step"]
    assert len(forwards) == 2
    assert min(forwards) < slow_done - SLOW_SEC / 2, (
        f"the first forward_backward reached the model service at "
        f"{datetime.fromtimestamp(min(forwards), UTC):%H:%M:%S.%f}, after the slow group "
        f"finished at {datetime.fromtimestamp(slow_done, UTC):%H:%M:%S.%f}"
    )
    assert optimizer > max(finished.values()) and optimizer > max(forwards)
