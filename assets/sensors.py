"""The batch gate: admits accepted runs and advances each run one batch at a time.

An accepted run is admitted under its organization's limit on concurrent runs
(`control/run_admission.py`): over it, the run waits in line with a `run.queued` event,
and a later tick admits and launches it once one of the organization's runs ends.
Batch k+1 is admitted only after batch k's terminal asset (the checkpoint for training,
assessments for an evaluation, trials for unscored execution) is materialized. The sensor
walks the control database's events and each terminal asset's materializations in order
with its own cursors, and every request carries a run key, so a re-evaluated tick never
launches a batch twice. A resumed run relaunches only the steps of its unfinished batch
that did not complete.
"""

import json
from dataclasses import asdict, dataclass, field
from typing import cast

import dagster as dg

from assets.jobs import BATCH_ASSETS, BATCH_JOBS, TERMINAL_ASSETS, pin_run_spec, warm_start_job
from assets.partitions import batches, runs
from assets.run_tags import run_tags
from resources.control_database import ControlDatabase
from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key, parse_batch_key
from synth_pipelines.control.events import read_events
from synth_pipelines.control.run_admission import admit_waiting_runs
from synth_pipelines.control.run_lifecycle import interrupt_run
from synth_pipelines.control.runs import get_run
from synth_pipelines.runtime.failures import innermost_cause


@dataclass
class GateCursor:
    events: int = 0
    materializations: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: str | None) -> "GateCursor":
        return cls(**json.loads(raw)) if raw else cls()

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def batch_request(
    run: RunRecord,
    index: int,
    *,
    run_key: str | None = None,
    assets: list[dg.AssetKey] | None = None,
) -> dg.RunRequest:
    key = batch_key(run.run_id, index)
    return dg.RunRequest(
        run_key=run_key or key,
        job_name=BATCH_JOBS[run.kind].name,
        partition_key=key,
        asset_selection=assets,
        tags={**run_tags(run), "synth/batch": key},
    )


def warm_start_request(run: RunRecord, run_key: str) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=run_key,
        job_name=warm_start_job.name,
        partition_key=run.run_id,
        tags=run_tags(run),
    )


def _resume(
    context: dg.SensorEvaluationContext, event: RunEvent, run: RunRecord
) -> tuple[str, dg.RunRequest]:
    """Relaunch the batch from its first step without a materialization of this partition."""
    partition = event.data["batch"]
    _, index = parse_batch_key(partition)
    order = BATCH_ASSETS[run.kind]

    def materialized(key: dg.AssetKey) -> bool:
        return bool(
            context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
            ).records
        )

    first = next((i for i, key in enumerate(order) if not materialized(key)), len(order) - 1)
    return partition, batch_request(
        run, index, run_key=f"{partition}.resume{event.seq}", assets=order[first:]
    )


@dg.sensor(
    jobs=[pin_run_spec, warm_start_job, *BATCH_JOBS.values()],
    minimum_interval_seconds=2,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def batch_gate(context: dg.SensorEvaluationContext, control: ControlDatabase) -> dg.SensorResult:
    cursor = GateCursor.parse(context.cursor)
    engine = control.engine()
    requests: list[dg.RunRequest] = []
    new_runs: list[str] = []
    new_batches: list[str] = []
    accepted: list[str] = []

    def launch(run: RunRecord) -> None:
        new_runs.append(run.run_id)
        requests.append(
            dg.RunRequest(
                run_key=f"spec:{run.run_id}",
                job_name=pin_run_spec.name,
                partition_key=run.run_id,
                tags=run_tags(run),
            )
        )
        if run.kind == "warm_start":
            requests.append(warm_start_request(run, f"warm:{run.run_id}"))
            return
        new_batches.append(batch_key(run.run_id, 0))
        requests.append(batch_request(run, 0))

    for event in read_events(
        engine, after=cursor.events, kinds=("run.accepted", "run.resumed"), limit=200
    ):
        cursor.events = event.seq
        run = get_run(engine, event.run_id)
        if run.finished:
            continue
        if run.kind == "warm_start" and event.kind == "run.resumed":
            requests.append(warm_start_request(run, f"warm:{run.run_id}.resume{event.seq}"))
            continue
        if event.kind == "run.resumed":
            partition, request = _resume(context, event, run)
            new_batches.append(partition)
            requests.append(request)
            continue
        if run.admitted_at is None:
            accepted.append(run.run_id)
        else:
            # Admitted by a tick that ended before it moved the cursor on: launch it
            # again (its run keys make the launch happen once).
            launch(run)

    for run_id in admit_waiting_runs(engine, announce=accepted).admitted:
        launch(get_run(engine, run_id))

    for asset in sorted(set(TERMINAL_ASSETS.values())):
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(asset),
                after_storage_id=cursor.materializations.get(asset, 0),
            ),
            limit=200,
            ascending=True,
        ).records
        for record in records:
            cursor.materializations[asset] = record.storage_id
            # Every terminal asset is partitioned by batch: its materializations name one.
            run_id, index = parse_batch_key(cast(str, record.partition_key))
            run = get_run(engine, run_id)
            if TERMINAL_ASSETS[run.kind] != asset or run.finished:
                continue
            if index + 1 < run.batch_count:
                new_batches.append(batch_key(run_id, index + 1))
                requests.append(batch_request(run, index + 1))

    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[
            request
            for request in (
                runs.build_add_request(new_runs) if new_runs else None,
                batches.build_add_request(sorted(set(new_batches))) if new_batches else None,
            )
            if request is not None
        ],
        cursor=cursor.dump(),
    )


@dg.run_failure_sensor(
    monitored_jobs=[warm_start_job, *BATCH_JOBS.values()],
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def batch_failure(context: dg.RunFailureSensorContext, control: ControlDatabase) -> None:
    run_id = context.dagster_run.tags.get("synth/run")
    if run_id:
        causes = [
            innermost_cause(event.step_failure_data.error).as_dict()
            for event in context.get_step_failure_events()
            if event.step_failure_data.error is not None
        ]
        interrupt_run(
            control.engine(),
            run_id,
            "a batch failed",
            {
                "batch": context.dagster_run.tags.get("synth/batch"),
                "dagster_run_id": context.dagster_run.run_id,
                "error": context.failure_event.message or "",
                "cause": causes[0] if causes else None,
            },
        )
