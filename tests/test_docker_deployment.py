"""Every batch in its own container: the production deployment `synth up --production`
starts (PostgreSQL, an S3 server, the capture proxy, a code server, the daemon and the
webserver; the model service is a scripted Tinker service the test starts) with
dagster-docker's `DockerRunLauncher` on the platform's own Docker engine.

Each Dagster run executes in a fresh container of the project's image
(`services/project_image.py`, built once per image cache), which sees the databases, the
bucket and the services' addresses through the variables the launcher passes, and none
of the host's files: its trials run in bubblewrap sandboxes inside the container.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy.exc
from sqlalchemy import select

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.schema import evidence_chunks
from synth_pipelines.services.production import read_env_file
from synth_pipelines.services.supervisor import Service, start, stop
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import trial_outcomes
from tests.conftest import PROJECT_ROOT
from tests.production_services import (
    DeploymentCli,
    ProductionEnvironment,
    S3Server,
    environment_applied,
    free_port,
    wait_until_stopped,
)
from tests.slow_tasks import slow_dataset
from tests.test_pool_admission import most_at_once
from tests.training_runs import script_one_right_one_wrong, training_dataset

pytestmark = pytest.mark.slow

POOL_ATTEMPTS = 2
CONTAINER_ID_TAG = "docker/container_id"
IMAGE_TAG = "dagster/image"


@dataclass
class DockerDeployment(DeploymentCli):
    """The deployment `synth up --production` started, and what it said it started."""

    started: dict
    operator: dict[str, str]
    """The environment `synth up --production` was first run with."""


def _production(env: dict[str, str], command: str, timeout: float) -> Any:
    """`synth up|down --production --json`, as an operator runs it; its JSON document."""
    done = subprocess.run(
        [sys.executable, "-m", "synth_pipelines.cli", command, "--production", "--json"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _up(env: dict[str, str]) -> dict:
    """The one command an operator runs; the first of a fresh image cache builds the
    project's image (minutes)."""
    return _production(env, "up", 1500)


def _down(env: dict[str, str]) -> list[dict]:
    return _production(env, "down", 300)


@pytest.fixture(scope="module")
def docker_deployment() -> Iterator[DockerDeployment]:
    # PostgreSQL runs as its own user, which must reach its directory: not under pytest's
    # private temporary root.
    root = Path(tempfile.mkdtemp(prefix="synth-docker-"))
    root.chmod(0o711)
    # A scripted Tinker service, so the training run's answers are deterministic: the
    # deployment uses a Tinker service named when it is first started instead of its own.
    model_port = free_port()
    model_service = Service(
        name="scripted-model-service",
        argv=[
            str(Path(sys.executable).parent / "synth"),
            *("model", "serve", "--scripted", "--port", str(model_port)),
        ],
        health_url=f"http://127.0.0.1:{model_port}/api/v1/healthz",
        address=f"http://127.0.0.1:{model_port}",
        # The deployment's services present this key, and the model service checks it.
        env={"TINKER_API_KEY": "tml-docker-test"},
    )
    operator = {
        **os.environ,
        "SYNTH_DATA_DIR": str(root),
        # The image cache (and the engine in it) of this checkout, shared with other tests.
        "SYNTH_IMAGE_CACHE_DIR": str(Settings().image_cache_dir),
        "TINKER_BASE_URL": model_service.address,
        "TINKER_API_KEY": "tml-docker-test",
        "SYNTH_ADMISSION_POOL": f"docker-{uuid.uuid4().hex[:8]}",
        "SYNTH_POOL_MAX_ACTIVE_ATTEMPTS": str(POOL_ATTEMPTS),
    }
    start(root, model_service, cwd=PROJECT_ROOT)
    environment = None
    try:
        started = _up(operator)
        values = read_env_file(Path(started["env_file"]))
        environment = ProductionEnvironment(
            root=root,
            control_url=values["SYNTH_DATABASE_URL"],
            dagster_url=values["SYNTH_DAGSTER_DATABASE_URL"],
            bucket=values["SYNTH_DAGSTER_LOGS_BUCKET"],
            s3=S3Server(values["SYNTH_S3_ENDPOINT_URL"]),
            env={**values, "SYNTH_IMAGE_CACHE_DIR": operator["SYNTH_IMAGE_CACHE_DIR"]},
        )
        yield DockerDeployment(environment, started, operator)
    finally:
        if environment is not None:
            try:
                with environment_applied(environment), dg.DagsterInstance.get() as instance:
                    containers = [
                        run.tags[CONTAINER_ID_TAG]
                        for run in instance.get_runs()
                        if CONTAINER_ID_TAG in run.tags
                    ]
            except sqlalchemy.exc.OperationalError:
                containers = []  # a test stopped the deployment and failed before its start
            if containers:
                # Each run container's volume holds its sandboxes' state: removed with it.
                _docker(environment.env, "rm", "--force", "--volumes", *containers)
        _down(operator)
        stop(root, model_service)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def deployed(docker_deployment: DockerDeployment) -> Iterator[DockerDeployment]:
    with environment_applied(docker_deployment.environment):
        yield docker_deployment


def _docker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *args],
        env={**env, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _start(deployment: DockerDeployment, command: str, *args: str) -> str:
    started = deployment.synth(command, "start", *args, "--json")
    assert started.returncode == 0, started.stderr
    return json.loads(started.stdout)["run_id"]


def _dagster_runs(run_id: str) -> list[dg.RunRecord]:
    with dg.DagsterInstance.get() as instance:
        return list(instance.get_run_records(filters=dg.RunsFilter(tags={"synth/run": run_id})))


def _dagster_messages(run_id: str) -> str:
    """What Dagster logged for the run's Dagster runs: the launcher's and monitor's words."""
    with dg.DagsterInstance.get() as instance:
        lines = []
        for record in _dagster_runs(run_id):
            for entry in instance.all_logs(record.dagster_run.run_id):
                lines.append(f"{record.dagster_run.job_name}: {entry.message}")
                data = entry.dagster_event and entry.dagster_event.event_specific_data
                error = getattr(data, "error", None)
                if error is not None:
                    lines.append(error.to_string())
        return "\n".join(lines)


def _finished_dagster_runs(run_id: str, timeout_sec: float = 120) -> list[dg.RunRecord]:
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        records = _dagster_runs(run_id)
        if records and all(record.dagster_run.is_finished for record in records):
            return records
        time.sleep(1)
    pytest.fail(f"the Dagster runs of {run_id} did not end within {timeout_sec:.0f} s")


def _active_batch_container(run_id: str, timeout_sec: float = 300) -> str:
    """The container of the run's batch once its trials are under way."""
    deadline = time.monotonic() + timeout_sec
    while time.monotonic() < deadline:
        if read_events(
            control_engine(Settings()), run_id=run_id, kinds=("batch.started",), limit=1
        ):
            for record in _dagster_runs(run_id):
                container = record.dagster_run.tags.get(CONTAINER_ID_TAG)
                if record.dagster_run.job_name.endswith("_batch") and container:
                    return container
        time.sleep(0.5)
    pytest.fail(f"no batch of {run_id} started in a container within {timeout_sec:.0f} s")


def _first_attempt(deployment: DockerDeployment, run_id: str) -> str:
    """How the run's first attempt went, as `synth attempt show` tells it."""
    (finished,) = read_events(
        control_engine(Settings()), run_id=run_id, kinds=("attempt.finished",), limit=1
    )
    return deployment.synth("attempt", "show", finished.data["attempt_id"]).stdout


# The first test of a fresh image cache builds the image (minutes) before its runs.
@pytest.mark.timeout(1800)
def test_an_evaluation_and_a_training_run_run_together_in_containers(
    deployed: DockerDeployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    deployed.publish_sample_dataset()
    published = deployed.synth(
        "dataset",
        "publish",
        str(training_dataset(tmp_path)),
        "--name",
        "synth/practice",
        "--version",
        "v1",
    )
    assert published.returncode == 0, published.stderr
    # The script goes to the model service with the deployment's key, as its services' calls.
    monkeypatch.setenv("TINKER_API_KEY", deployed.environment.env["TINKER_API_KEY"])
    script_one_right_one_wrong(deployed.environment.env["SYNTH_MODEL_SERVICE_URL"], batches=3)
    training = _start(
        deployed,
        "train",
        "--dataset",
        "synth/practice@v1",
        "--actor",
        "@profiles/builtin.json",
        "--plan",
        json.dumps(
            {
                "kind": "train",
                "groups_per_batch": 2,
                "attempts_per_group": 2,
                "batches": 3,
                "learning_rate": 0.01,
                "lora_rank": 4,
                "max_tokens": 64,
            }
        ),
        "--idempotency-key",
        "docker-train",
    )
    evaluation = _start(
        deployed,
        "run",
        "--dataset",
        "synth/sample@v1",
        "--actor",
        "@profiles/oracle.json",
        "--plan",
        json.dumps({"kind": "eval", "max_tasks": 6, "tasks_per_batch": 3}),
        "--idempotency-key",
        "docker-eval",
    )
    for run_id in (evaluation, training):
        stopped = wait_until_stopped(run_id, 900)
        assert stopped.status == "succeeded", _dagster_messages(run_id)

    shown = json.loads(deployed.synth("run", "show", evaluation, "--json").stdout)["summary"]
    assert shown["attempts"] == 6 and shown["pass_rate"] == 1.0, _first_attempt(
        deployed, evaluation
    )

    # Every Dagster run of both ran in a container of the project's image, and ended well.
    records = {run_id: _finished_dagster_runs(run_id) for run_id in (training, evaluation)}
    image = deployed.started["image"]
    containers = []
    for run_records in records.values():
        for record in run_records:
            tags = record.dagster_run.tags
            assert record.dagster_run.status == dg.DagsterRunStatus.SUCCESS
            assert tags.get(IMAGE_TAG) == image, tags
            containers.append(tags[CONTAINER_ID_TAG])
    inspected = json.loads(
        _docker(deployed.environment.env, "container", "inspect", *containers).stdout
    )
    assert {item["Config"]["Image"] for item in inspected} == {image}
    assert {item["State"]["ExitCode"] for item in inspected} == {0}
    assert all(
        not item["Mounts"] or all(m["Type"] == "volume" for m in item["Mounts"])
        for item in inspected
    )

    # The two runs executed at the same time, and their attempts shared one pool.
    def span(run_id: str) -> tuple[float, float]:
        batches = [r for r in records[run_id] if r.dagster_run.job_name.endswith("_batch")]
        return min(r.start_time for r in batches), max(r.end_time for r in batches)

    (train_start, train_end), (eval_start, eval_end) = span(training), span(evaluation)
    assert train_start < eval_end and eval_start < train_end
    intervals = {
        run_id: [
            (outcome.started_at.timestamp(), outcome.finished_at.timestamp())
            for outcome in trial_outcomes(get_run(control_engine(Settings()), run_id))
        ]
        for run_id in (training, evaluation)
    }
    assert len(intervals[training]) == 12 and len(intervals[evaluation]) == 6
    assert most_at_once(intervals[training] + intervals[evaluation]) <= POOL_ATTEMPTS

    # Checkpoints committed, lineage in Dagster, evidence in the bucket and verified.
    listed = json.loads(deployed.synth("run", "checkpoints", training, "--json").stdout)
    shown = deployed.synth("run", "show", training).stdout
    assert [c["optimizer_steps"] for c in listed] == [1, 2, 3], shown
    with dg.DagsterInstance.get() as instance:
        for asset in ("trials", "captured_interactions", "datums", "checkpoints"):
            partitions = instance.get_materialized_partitions(dg.AssetKey(asset))
            assert {f"{training}.b{i:04d}" for i in range(3)} <= partitions, asset
    store = open_object_store(
        deployed.environment.env["SYNTH_OBJECT_STORE_URL"],
        endpoint_url=deployed.environment.s3.endpoint_url,
    )
    with control_engine(Settings()).connect() as connection:
        chunks = connection.execute(
            select(evidence_chunks.c.chunk_key, evidence_chunks.c.sha256).where(
                evidence_chunks.c.run_id == training
            )
        ).all()
    assert chunks
    # The run workers wrote nothing on the host: no trial scratch, no local objects.
    state = deployed.state_dir
    assert not (state / "work").exists() and not (state / "objects").exists()

    # The deployment stopped and started again keeps everything: the runs in the database,
    # every evidence chunk in the bucket (its server replays its journal), the checkpoints.
    assert {row["service"] for row in _down(deployed.operator) if row["stopped"]} == {
        row["service"] for row in deployed.started["services"]
    }
    again = _up(deployed.operator)
    assert again["env_file"] == deployed.started["env_file"]
    assert again["image"] == image
    for key, sha256 in chunks:
        store.get(key, expected_sha256=sha256)
    after = json.loads(deployed.synth("run", "checkpoints", training, "--json").stdout)
    assert after == listed


@pytest.mark.timeout(1800)
def test_a_killed_container_fails_its_run_and_cancel_stops_one(
    deployed: DockerDeployment, tmp_path: Path
):
    published = deployed.synth(
        "dataset",
        "publish",
        str(slow_dataset(tmp_path, 120)),
        "--name",
        "synth/slow",
        "--version",
        "v1",
    )
    assert published.returncode == 0, published.stderr
    plan = json.dumps({"kind": "eval", "max_tasks": 1, "tasks_per_batch": 1})
    killed, cancelled = (
        _start(
            deployed,
            "run",
            "--dataset",
            "synth/slow@v1",
            "--actor",
            "@profiles/oracle.json",
            "--plan",
            plan,
            "--idempotency-key",
            key,
        )
        for key in ("docker-killed", "docker-cancelled")
    )

    # A container killed outright: run monitoring finds it and the run says so.
    container = _active_batch_container(killed)
    assert _docker(deployed.environment.env, "kill", container).returncode == 0
    killed_at = time.monotonic()
    stopped = wait_until_stopped(killed, 300)
    detected_sec = time.monotonic() - killed_at
    print(f"killed container detected after {detected_sec:.1f} s")
    assert stopped.status == "interrupted"
    (interruption,) = read_events(
        control_engine(Settings()), run_id=killed, kinds=("run.interrupted",)
    )
    assert interruption.data["batch"] == f"{killed}.b0000"
    assert "Container status is exited" in interruption.data["error"], interruption.data

    # Cancelling a run stops its batch's container, and with it every sandbox in it.
    container = _active_batch_container(cancelled)
    cancel = deployed.synth("run", "cancel", cancelled, "--json")
    assert cancel.returncode == 0, cancel.stderr
    assert json.loads(cancel.stdout)["terminated"]
    state = json.loads(_docker(deployed.environment.env, "container", "inspect", container).stdout)[
        0
    ]["State"]
    assert not state["Running"]
    (record,) = [
        r for r in _finished_dagster_runs(cancelled) if r.dagster_run.job_name.endswith("_batch")
    ]
    assert record.dagster_run.status == dg.DagsterRunStatus.CANCELED
    assert get_run(control_engine(Settings()), cancelled).status == "cancelled"
    assert read_events(control_engine(Settings()), run_id=cancelled, kinds=("run.cancelled",))
