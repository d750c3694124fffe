"""The Dagster table of contents: assets, jobs, sensors and resources in one place.

The settings are read here, once, when a process loads the definitions (the code server,
a run worker, a run's container): every resource is built from them, and what assets,
sensors and schedules need besides the stores and the model service is the `deployment`
resource, the settings themselves.
"""

import os

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
from synth_pipelines.config import Settings, settings


def _named_by_variable(variable: str, value: str) -> str | dg.EnvVar:
    """`value`, or the variable it was read from: a resource's configured values show in
    the UI, and a value given in the environment may hold a secret (a database URL's
    password, an API key), which the UI then shows as the variable's name."""
    return dg.EnvVar(variable) if os.environ.get(variable) == value else value


def definitions(config: Settings) -> dg.Definitions:
    objects = ObjectStoreResource(url=config.objects_url, endpoint_url=config.s3_endpoint_url)
    control = ControlDatabase(
        url=_named_by_variable("SYNTH_DATABASE_URL", config.control_database_url)
    )
    return dg.Definitions(
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
            "training": TrainingService(
                base_url=config.model_backend_url,
                api_key=_named_by_variable("TINKER_API_KEY", config.tinker_api_key),
            ),
            "table_io": TableIOManager(objects=objects, control=control),
            "deployment": config,
        },
    )


defs = definitions(settings())
