"""A batch's completion is recorded once, and only while its run is active: the check and
the record are one transaction, on SQLite and on PostgreSQL."""

import json
import threading

import pytest
from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine, engine_for
from synth_pipelines.control.events import read_events
from synth_pipelines.control.run_lifecycle import cancel_run, complete_batch, start_batch
from synth_pipelines.control.runs import accept_run, get_run
from tests.conftest import PROJECT_ROOT

RACERS = 8


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest) -> Engine:
    if request.param == "sqlite":
        request.getfixturevalue("state")
        return control_engine(Settings())
    server = request.getfixturevalue("postgres_server")
    return engine_for(server.create_database("completion"))


def _running_evaluation(engine: Engine) -> RunRecord:
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    request = RunRequest(
        owner="tester",
        dataset=DatasetPin(
            name="synth/sample", version="v1", digest="sha256:" + "0" * 64, task_count=8
        ),
        actor=PinnedProfile.from_document(oracle),
        plan=EvalPlan(kind="eval", tasks_per_batch=4),
    )
    run, _ = accept_run(engine, request, "completion", org="local")
    start_batch(engine, run.spec, 0, attempts=4)
    return run


def _completions(engine: Engine, run: RunRecord) -> list[int]:
    events = read_events(engine, run_id=run.run_id, kinds=("batch.completed",))
    return [event.data["index"] for event in events]


def test_racing_completions_of_a_batch_record_it_once(engine):
    run = _running_evaluation(engine)
    gate = threading.Barrier(RACERS)
    recorded: list[bool] = []

    def complete() -> None:
        gate.wait()
        recorded.append(complete_batch(engine, run.spec, 0, {"passed": 4}))

    threads = [threading.Thread(target=complete) for _ in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(recorded) == [False] * (RACERS - 1) + [True]
    assert _completions(engine, run) == [0]
    assert get_run(engine, run.run_id).status == "running"


def test_the_last_batch_completes_the_run_in_the_same_transaction(engine):
    run = _running_evaluation(engine)
    assert complete_batch(engine, run.spec, 0, {})
    assert complete_batch(engine, run.spec, 1, {})
    assert not complete_batch(engine, run.spec, 1, {})
    assert _completions(engine, run) == [0, 1]
    kinds = [event.kind for event in read_events(engine, run_id=run.run_id)]
    assert kinds[-2:] == ["batch.completed", "run.succeeded"]
    assert get_run(engine, run.run_id).status == "succeeded"


def test_a_cancelled_run_records_no_completion(engine):
    run = _running_evaluation(engine)
    assert cancel_run(engine, run.run_id, "the operator cancelled it")
    assert not complete_batch(engine, run.spec, 0, {"passed": 4})
    assert _completions(engine, run) == []
    assert read_events(engine, run_id=run.run_id)[-1].kind == "run.cancelled"
