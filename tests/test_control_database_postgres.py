"""The control database on a real PostgreSQL server: the behaviours SQLite gave for free."""

import json
import threading

from sqlalchemy import create_engine, inspect

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine, create_tables
from synth_pipelines.control.events import append_event, read_events
from synth_pipelines.control.runs import accept_run, list_runs
from synth_pipelines.control.schema import metadata
from tests.conftest import PROJECT_ROOT


def _request() -> RunRequest:
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    return RunRequest(
        owner="tester",
        dataset=DatasetPin(
            name="synth/sample", version="v1", digest="sha256:" + "0" * 64, task_count=16
        ),
        actor=PinnedProfile.from_document(oracle),
        plan=EvalPlan(kind="eval", tasks_per_batch=4),
    )


def test_services_starting_together_create_the_schema_once(postgres_server):
    url = postgres_server.create_database("schema")
    engines = [create_engine(url) for _ in range(6)]
    failures: list[BaseException] = []
    gate = threading.Barrier(len(engines))

    def start_up(engine) -> None:
        gate.wait()
        try:
            create_tables(engine)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=start_up, args=(engine,)) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert set(metadata.tables) <= set(inspect(engines[0]).get_table_names())


def test_event_cursor_never_steps_over_an_event_that_commits_late(production_env):
    engine = control_engine(Settings())
    run, _ = accept_run(engine, _request(), "late-commit", org="local")
    cursor = read_events(engine, run_id=run.run_id)[-1].seq
    slow = engine.connect()
    slow_transaction = slow.begin()
    append_event(slow, run.run_id, "attempt.finished", {"n": 1})
    fast = threading.Thread(target=_append_and_commit, args=(engine, run.run_id, {"n": 2}))
    fast.start()
    fast.join(timeout=1)
    seen = read_events(engine, run_id=run.run_id, after=cursor)
    if seen:
        cursor = seen[-1].seq
    slow_transaction.commit()
    slow.close()
    fast.join()
    seen += read_events(engine, run_id=run.run_id, after=cursor)
    assert [event.data["n"] for event in seen] == [1, 2]


def _append_and_commit(engine, run_id: str, data: dict) -> None:
    with engine.begin() as conn:
        append_event(conn, run_id, "attempt.finished", data)


def test_concurrent_submissions_with_one_key_accept_one_run(production_env):
    engine = control_engine(Settings())
    ids: list[str] = []
    gate = threading.Barrier(6)

    def submit() -> None:
        gate.wait()
        ids.append(accept_run(engine, _request(), "racing-key", org="local")[0].run_id)

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ids) == 6 and len(set(ids)) == 1
    assert [run.run_id for run in list_runs(engine)] == ids[:1]
