"""Launching an experiment from the Dagster UI: the `launch_experiment` job, submitted
through the webserver's GraphQL API as the Launchpad does, on the production deployment,
and refusing bad input with the reason."""

import json
import time
from urllib.parse import urlparse

import dagster as dg
import pytest
from dagster_graphql import DagsterGraphQLClient

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run, list_runs
from synth_pipelines.definitions import definitions
from synth_pipelines.registry.datasets import publish_dataset
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import SAMPLE_DATASET

PLAN = json.dumps({"kind": "eval", "max_tasks": 1, "tasks_per_batch": 1})


def _graphql(production) -> DagsterGraphQLClient:
    address = urlparse(production.environment.env["SYNTH_DAGSTER_URL"])
    return DagsterGraphQLClient(address.hostname, port_number=address.port)


def _launch(production, **config: str) -> dg.DagsterRun:
    """Submit `launch_experiment` over GraphQL and wait for that Dagster run to end."""
    client = _graphql(production)
    dagster_run_id = client.submit_job_execution(
        "launch_experiment", run_config={"ops": {"accepted_run": {"config": config}}}
    )
    deadline = time.monotonic() + 300
    while client.get_run_status(dagster_run_id) not in (
        dg.DagsterRunStatus.SUCCESS,
        dg.DagsterRunStatus.FAILURE,
    ):
        if time.monotonic() > deadline:
            pytest.fail(f"launch_experiment run {dagster_run_id} did not end within 300 s")
        time.sleep(1)
    with dg.DagsterInstance.get() as instance:
        return instance.get_run_by_id(dagster_run_id)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_launched_experiment_is_the_cli_run_and_completes(production):
    production.publish_sample_dataset()
    experiment = {
        "dataset": "synth/sample@v1",
        "actor": "@profiles/oracle.json",
        "plan": PLAN,
        "idempotency_key": "from-the-ui",
    }
    first = _launch(production, **experiment)
    assert first.status == dg.DagsterRunStatus.SUCCESS
    run_id = first.tags["synth/run"]
    again = _launch(production, **experiment)
    assert again.status == dg.DagsterRunStatus.SUCCESS
    assert again.tags["synth/run"] == run_id
    from_cli = production.synth(
        "run",
        "start",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        PLAN,
        "--idempotency-key",
        "from-the-ui",
        "--json",
    )
    assert from_cli.returncode == 0, from_cli.stderr
    assert json.loads(from_cli.stdout)["run_id"] == run_id
    assert [run.run_id for run in list_runs(control_engine(Settings()))] == [run_id]

    deadline = time.monotonic() + 480
    while (run := get_run(control_engine(Settings()), run_id)).status in ("accepted", "running"):
        if time.monotonic() > deadline:
            pytest.fail(f"run {run_id} was still {run.status} after 480 s")
        time.sleep(1)
    assert run.status == "succeeded"
    assert run.spec.actor.name == "synth/oracle"


def test_launch_with_an_invalid_plan_fails_with_the_reason_and_accepts_nothing(state):
    publish_dataset(
        control_engine(Settings()),
        open_object_store(Settings().objects_url),
        SAMPLE_DATASET,
        "synth/sample",
        "v1",
        "tester",
    )
    experiment = {
        "dataset": "synth/sample@v1",
        "actor": "@profiles/oracle.json",
        "plan": json.dumps({"kind": "eval", "tasks_per_batch": 0}),
    }
    with dg.DagsterInstance.get() as instance:
        result = (
            definitions(Settings())
            .resolve_job_def("launch_experiment")
            .execute_in_process(
                run_config={"ops": {"accepted_run": {"config": experiment}}},
                instance=instance,
                raise_on_error=False,
            )
        )
    assert not result.success
    (failure,) = [event for event in result.all_events if event.is_step_failure]
    description = failure.step_failure_data.user_failure_data.description
    assert description.startswith("plan ")
    assert "tasks_per_batch" in description and "greater than or equal to 1" in description
    assert list_runs(control_engine(Settings())) == []
