"""Starting a regrade: checked up front, recorded, then launched as a backfill of
`assessments` over the run's batches (so it shows as a backfill in the Dagster UI)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.regrade import Regrade
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.events import record_event
from synth_pipelines.control.regrades import attach_backfill, get_regrade, record_regrade
from synth_pipelines.control.table_outputs import current_table_ref
from synth_pipelines.judging.assessing import Assessor
from synth_pipelines.runtime.regrade import RegradeRefusedError, check_regradable, task_dirs_for
from synth_pipelines.services.dagster_graphql import (
    DagsterUnavailableError,
    DagsterWebserver,
    launch_asset_backfill,
)
from synth_pipelines.storage.objectstore import ObjectStore


def request_regrade(
    engine: Engine,
    store: ObjectStore,
    run: RunRecord,
    judge: PinnedProfile | None,
    *,
    work_dir: Path,
    webserver: DagsterWebserver,
) -> Regrade:
    if judge is not None and judge.profile().role != "judge":
        raise RegradeRefusedError(
            f'profile {judge.name}@{judge.version} is not a judge profile (set "role": "judge")'
        )
    partitions = [batch_key(run.run_id, index) for index in range(run.batch_count)]
    missing = [p for p in partitions if current_table_ref(engine, "trials", p) is None]
    if missing:
        raise RegradeRefusedError(
            f"run {run.run_id} has no retained trials for {', '.join(missing)}; only finished "
            "batches can be regraded"
        )
    for index in range(run.batch_count):
        check_regradable(task_dirs_for(engine, store, run.spec, index, work_dir))
    assessor = Assessor.of(judge)
    regrade = record_regrade(engine, run.run_id, assessor.name, assessor.digest, len(partitions))
    try:
        backfill = _launch(webserver, run, regrade, judge, assessor, partitions)
    except DagsterUnavailableError as error:
        # The request stays on record, marked as never launched, so the run's history
        # shows why no assessments followed it.
        record_event(
            engine,
            run.run_id,
            "regrade.not_launched",
            {"regrade_id": regrade.regrade_id, "reason": str(error)},
        )
        raise
    attach_backfill(engine, regrade.regrade_id, backfill)
    return get_regrade(engine, regrade.regrade_id)


def _launch(
    webserver: DagsterWebserver,
    run: RunRecord,
    regrade: Regrade,
    judge: PinnedProfile | None,
    assessor: Assessor,
    partitions: list[str],
) -> str:
    return launch_asset_backfill(
        webserver,
        "assessments",
        partitions,
        {
            "ops": {
                "batch": {
                    "config": {
                        "regrade_id": regrade.regrade_id,
                        "judge": judge.model_dump_json() if judge else "",
                    }
                }
            }
        },
        {"synth/run": run.run_id, "synth/regrade": regrade.regrade_id},
        f"regrade {run.run_id} with {assessor.name}",
    )
