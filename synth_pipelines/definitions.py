"""The Dagster table of contents: assets, jobs, sensors and resources in one place."""

from __future__ import annotations

import dagster as dg

from assets.assessments import assessments
from assets.dataset_tasks import dataset_tasks
from assets.jobs import BATCH_JOBS, pin_run_spec
from assets.run_spec import run_spec
from assets.sensors import batch_failure, batch_gate
from assets.trials import trials
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from resources.table_io import TableIOManager

objects = ObjectStoreResource()
control = ControlDatabase()

defs = dg.Definitions(
    assets=[dataset_tasks, run_spec, trials, assessments],
    jobs=[pin_run_spec, *BATCH_JOBS.values()],
    sensors=[batch_gate, batch_failure],
    resources={
        "objects": objects,
        "control": control,
        "table_io": TableIOManager(objects=objects, control=control),
    },
)
