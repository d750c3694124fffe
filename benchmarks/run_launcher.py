"""What a container per batch costs: the production deployment with Dagster's default run
launcher against the same deployment with `DockerRunLauncher`, measured in one run.

Each deployment (PostgreSQL, an S3 server, the capture proxy, the model service, a code
server, the daemon and the webserver, as `tests/production_services.py` starts them for
the suite) runs the same oracle evaluation of the sample dataset, one task per batch.
Per batch it reads Dagster's own run events: launch to worker start (`RUN_STARTING` to
`RUN_START`: for Docker, creating and starting the container and the worker's imports in
it; for the default launcher, a subprocess of the code server) and the batch's wall time
(`RUN_START` to `RUN_SUCCESS`). It also times the project image build (cached or not)
and each deployment's start-up, and prints docker/default ratios.

    .venv/bin/python -m benchmarks.run_launcher [--batches 4]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import dagster as dg

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import get_run
from synth_pipelines.services.dockerd import DockerDaemon
from synth_pipelines.services.project_image import build_project_image
from tests.production_services import (
    PostgresServer,
    ProductionDeployment,
    S3Server,
    environment_applied,
    production_environment,
    running_postgres,
    running_s3_server,
)


def _event_time(instance: dg.DagsterInstance, run_id: str, kind: dg.DagsterEventType) -> float:
    (entry,) = instance.all_logs(run_id, of_type=kind)
    return entry.timestamp


def _measure(deployment: ProductionDeployment, batches: int) -> dict:
    started = time.monotonic()
    deployment.start()
    start_up = time.monotonic() - started
    try:
        deployment.publish_sample_dataset()
        plan = json.dumps({"kind": "eval", "max_tasks": batches, "tasks_per_batch": 1})
        accepted = deployment.synth(
            "run", "start", "--dataset", "synth/sample@v1", "--actor", "@profiles/oracle.json",
            "--plan", plan, "--idempotency-key", "launcher-benchmark", "--json",
        )  # fmt: skip
        assert accepted.returncode == 0, accepted.stderr
        run_id = json.loads(accepted.stdout)["run_id"]
        submitted = time.monotonic()
        while get_run(control_engine(Settings()), run_id).status in ("accepted", "running"):
            time.sleep(0.5)
        run_wall = time.monotonic() - submitted
        assert get_run(control_engine(Settings()), run_id).status == "succeeded", run_id
        launch, wall = [], []
        with dg.DagsterInstance.get() as instance:
            deadline = time.monotonic() + 60
            while True:
                records = instance.get_runs(filters=dg.RunsFilter(tags={"synth/run": run_id}))
                batch_runs = [r for r in records if r.job_name.endswith("_batch")]
                if all(r.is_finished for r in batch_runs) or time.monotonic() > deadline:
                    break
                time.sleep(1)
            for run in batch_runs:
                starting = _event_time(instance, run.run_id, dg.DagsterEventType.RUN_STARTING)
                begun = _event_time(instance, run.run_id, dg.DagsterEventType.RUN_START)
                ended = _event_time(instance, run.run_id, dg.DagsterEventType.RUN_SUCCESS)
                launch.append(begun - starting)
                wall.append(ended - begun)
        return {
            "start_up_sec": start_up,
            "run_wall_sec": run_wall,
            "batches": len(batch_runs),
            "launch_to_start_sec": statistics.median(launch),
            "batch_wall_sec": statistics.median(wall),
        }
    finally:
        deployment.stop()


def _deployment(
    root: Path, postgres: PostgresServer, s3: S3Server, instance: str, extra: dict[str, str]
) -> ProductionDeployment:
    environment = production_environment(root, postgres, s3, instance=instance)
    environment.env.update(extra)
    return ProductionDeployment(environment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()
    config = Settings()
    engine = DockerDaemon.of(config.images_dir, config.project_root)
    engine.ensure()
    started = time.monotonic()
    image = build_project_image(
        engine,
        progress=lambda line: print(f"  {line}", flush=True),
        images_dir=config.images_dir,
        debian_mirror=config.debian_mirror,
        project_root=config.project_root,
    )
    image_sec = time.monotonic() - started
    print(f"project image {image.tag}: {'built' if image.built else 'cached'} in {image_sec:.1f} s")
    docker_env = {
        "DOCKER_HOST": engine.host,
        "DOCKER_CONFIG": str(engine.client_config),
        "SYNTH_PROJECT_IMAGE": image.tag,
        "SYNTH_PROXY_SIGNING_KEY": secrets.token_hex(32),
        "SYNTH_ADMISSION_POOL": f"launcher-benchmark-{uuid.uuid4().hex[:8]}",
        "SYNTH_POOL_MAX_ACTIVE_ATTEMPTS": "4",
    }
    results = {}
    with running_postgres() as postgres, running_s3_server() as s3:
        for name, instance in (
            ("default", "dagster.production.yaml"),
            ("docker", "dagster.docker.yaml"),
        ):
            root = Path(tempfile.mkdtemp(prefix=f"synth-launcher-{name}-"))
            deployment = _deployment(root, postgres, s3, instance, docker_env)
            with environment_applied(deployment.environment):
                results[name] = _measure(deployment, args.batches)
            print(f"{name}: {results[name]}", flush=True)
    default, docker = results["default"], results["docker"]
    print()
    print(f"{'measure':<34}{'default':>10}{'docker':>10}{'ratio':>8}")
    for key, label in (
        ("start_up_sec", "deployment start-up, s"),
        ("launch_to_start_sec", "batch launch to worker start, s"),
        ("batch_wall_sec", "batch wall (one oracle trial), s"),
        ("run_wall_sec", f"run of {args.batches} batches, wall s"),
    ):
        ratio = docker[key] / default[key] if default[key] else float("nan")
        print(f"{label:<34}{default[key]:>10.1f}{docker[key]:>10.1f}{ratio:>8.2f}")
    print(
        "per-batch overhead of a container, median: "
        f"{docker['launch_to_start_sec'] - default['launch_to_start_sec']:+.1f} s to start, "
        f"{docker['batch_wall_sec'] - default['batch_wall_sec']:+.1f} s in the batch"
    )


if __name__ == "__main__":
    main()
