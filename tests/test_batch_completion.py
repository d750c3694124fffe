"""A batch's completion is recorded once, only while its run is active, and only by the
worker attempt that holds the batch: the check and the record are one transaction, on
SQLite and on PostgreSQL."""

import threading

from sqlalchemy import Engine

from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.events import read_events
from synth_pipelines.control.run_lifecycle import cancel_run
from synth_pipelines.control.runs import get_run
from tests.claimed_runs import claimed, running_evaluation

RACERS = 8


def _completions(engine: Engine, run: RunRecord) -> list[int]:
    events = read_events(engine, run_id=run.run_id, kinds=("batch.completed",))
    return [event.data["index"] for event in events]


def test_racing_completions_of_a_batch_record_it_once(either_database):
    engine = either_database
    run = running_evaluation(engine)
    claim = claimed(engine, run, 0)
    gate = threading.Barrier(RACERS)
    recorded: list[bool] = []

    def complete() -> None:
        gate.wait()
        recorded.append(claim.complete(run.spec, {"passed": 4}))

    threads = [threading.Thread(target=complete) for _ in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(recorded) == [False] * (RACERS - 1) + [True]
    assert _completions(engine, run) == [0]
    assert get_run(engine, run.run_id).status == "running"


def test_the_last_batch_completes_the_run_in_the_same_transaction(either_database):
    engine = either_database
    run = running_evaluation(engine)
    assert claimed(engine, run, 0).complete(run.spec, {})
    last = claimed(engine, run, 1)
    assert last.complete(run.spec, {})
    assert not last.complete(run.spec, {})
    assert _completions(engine, run) == [0, 1]
    kinds = [event.kind for event in read_events(engine, run_id=run.run_id)]
    assert kinds[-2:] == ["batch.completed", "run.succeeded"]
    assert get_run(engine, run.run_id).status == "succeeded"


def test_a_cancelled_run_records_no_completion(either_database):
    engine = either_database
    run = running_evaluation(engine)
    claim = claimed(engine, run, 0)
    assert cancel_run(engine, run.run_id, "the operator cancelled it")
    assert not claim.complete(run.spec, {"passed": 4})
    assert _completions(engine, run) == []
    assert read_events(engine, run_id=run.run_id)[-1].kind == "run.cancelled"
