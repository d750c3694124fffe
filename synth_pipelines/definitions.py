"""The Dagster table of contents: assets, jobs, sensors and resources in one place."""

import dagster as dg

from assets.batch import batch
from assets.captured_interactions import captured_interactions
from assets.dataset_tasks import dataset_tasks
from assets.jobs import BATCH_JOBS, pin_run_spec, warm_start_job
from assets.launch_experiment import launch_experiment
from assets.policy import policy
from assets.run_spec import run_spec
from assets.schedules import nightly_checkpoint_evaluation
from assets.sensors import batch_failure, batch_gate
from assets.warm_start import warm_start
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from resources.table_io import TableIOManager
from resources.training import TrainingService

objects = ObjectStoreResource()
control = ControlDatabase()

defs = dg.Definitions(
    assets=[
        dataset_tasks,
        run_spec,
        policy,
        batch,
        captured_interactions,
        warm_start,
    ],
    jobs=[launch_experiment, pin_run_spec, warm_start_job, *BATCH_JOBS.values()],
    sensors=[batch_gate, batch_failure],
    schedules=[nightly_checkpoint_evaluation],
    resources={
        "objects": objects,
        "control": control,
        "training": TrainingService(),
        "table_io": TableIOManager(objects=objects, control=control),
    },
)
