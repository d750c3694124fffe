"""An evaluation run accepted in a control database, SQLite's or PostgreSQL's, and its
batches claimed by a worker of the test's own."""

import json

import pytest
from sqlalchemy import Engine

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import EvalPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.control.database import control_engine, engine_for
from synth_pipelines.control.runs import accept_run
from synth_pipelines.control.worker_attempts import claim_batch
from synth_pipelines.control.worker_claim import WorkerClaim
from tests.conftest import PROJECT_ROOT
from tests.recorded_batches import WORKER


@pytest.fixture(params=["sqlite", "postgresql"])
def either_database(request: pytest.FixtureRequest) -> Engine:
    if request.param == "sqlite":
        request.getfixturevalue("state")
        return control_engine(Settings())
    server = request.getfixturevalue("postgres_server")
    return engine_for(server.create_database("completion"))


def claimed(engine: Engine, run: RunRecord, index: int) -> WorkerClaim:
    return WorkerClaim(engine, claim_batch(engine, run.spec, index, WORKER, lease_sec=60), 60)


def running_evaluation(engine: Engine, owner: str = "tester") -> RunRecord:
    oracle = json.loads((PROJECT_ROOT / "profiles" / "oracle.json").read_text())
    request = RunRequest(
        owner=owner,
        dataset=DatasetPin(
            name="synth/sample", version="v1", digest="sha256:" + "0" * 64, task_count=8
        ),
        actor=PinnedProfile.from_document(oracle),
        plan=EvalPlan(kind="eval", tasks_per_batch=4),
    )
    run, _ = accept_run(engine, request, "completion", org="local")
    return run
