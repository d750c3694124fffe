import json
import threading

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events, record_event
from synth_pipelines.control.runs import (
    IdempotencyConflictError,
    accept_run,
    get_run,
    list_runs,
    transition,
)
from tests.conftest import PROJECT_ROOT


def _request(attempts: int = 2) -> RunRequest:
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    return RunRequest(
        owner="tester",
        dataset=DatasetPin(
            name="synth/sample", version="v1", digest="sha256:" + "0" * 64, task_count=16
        ),
        actor=PinnedProfile.from_document(oracle),
        plan=EvalPlan(kind="eval", attempts_per_task=attempts, tasks_per_batch=5),
    )


def test_same_idempotency_key_returns_the_same_run_and_creates_nothing(state):
    engine = control_engine(Settings())
    first, created = accept_run(engine, _request(), "key-1", org="local")
    second, created_again = accept_run(engine, _request(), "key-1", org="local")
    assert created and not created_again
    assert first.run_id == second.run_id
    assert len(list_runs(engine)) == 1
    assert [e.kind for e in read_events(engine, run_id=first.run_id)] == ["run.accepted"]


def test_concurrent_submissions_with_one_key_accept_one_run(state):
    engine = control_engine(Settings())
    ids: list[str] = []

    def submit() -> None:
        ids.append(accept_run(engine, _request(), "racing-key", org="local")[0].run_id)

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1
    assert len(list_runs(engine)) == 1


def test_reusing_a_key_for_a_different_request_is_refused(state):
    engine = control_engine(Settings())
    accept_run(engine, _request(attempts=2), "key-2", org="local")
    with pytest.raises(IdempotencyConflictError) as refused:
        accept_run(engine, _request(attempts=3), "key-2", org="local")
    # The refusal names what differs, and only that, on one line.
    message = str(refused.value)
    assert "plan.attempts_per_task: 2 -> 3" in message and "\n" not in message
    assert "dataset" not in message and "actor" not in message
    with pytest.raises(IdempotencyConflictError, match='model: null -> "synth/qwen3-tiny"'):
        accept_run(
            engine,
            _request().model_copy(update={"model": "synth/qwen3-tiny"}),
            "key-2",
            org="local",
        )
    judged = _request().model_copy(update={"judge": _request().actor})
    with pytest.raises(IdempotencyConflictError, match=r"judge: none -> \S+@\S+ \(sha256:"):
        accept_run(engine, judged, "key-2", org="local")


def test_acceptance_pins_the_spec_and_counts_batches(state):
    run, _ = accept_run(control_engine(Settings()), _request(), None, org="local")
    stored = get_run(control_engine(Settings()), run.run_id)
    assert stored.status == "accepted"
    assert stored.batch_count == 4
    assert stored.spec.actor.profile().engine == "oracle"
    assert stored.spec.digest() == stored.request_digest


def test_events_resume_from_a_cursor(state):
    engine = control_engine(Settings())
    run, _ = accept_run(engine, _request(), None, org="local")
    for n in range(5):
        record_event(engine, run.run_id, "attempt.finished", {"n": n})
    everything = read_events(engine, run_id=run.run_id)
    cursor = everything[2].seq
    resumed = read_events(engine, run_id=run.run_id, after=cursor)
    assert resumed == everything[3:]
    assert [e.data.get("n") for e in resumed] == [2, 3, 4]


def test_final_states_are_never_left(state):
    engine = control_engine(Settings())
    run, _ = accept_run(engine, _request(), None, org="local")
    assert transition(engine, run.run_id, "failed", "run.failed", {"reason": "x"})
    assert not transition(engine, run.run_id, "succeeded", "run.succeeded")
    assert get_run(engine, run.run_id).status == "failed"
