"""Jobs the gate sensor launches: one run per batch, the selection set by the plan kind."""

import dagster as dg

from assets.assessments import assessments
from assets.partitions import batches, runs
from assets.run_spec import run_spec
from assets.trials import trials

pin_run_spec = dg.define_asset_job("pin_run_spec", selection=[run_spec], partitions_def=runs)
execution_batch = dg.define_asset_job("execution_batch", selection=[trials], partitions_def=batches)
evaluation_batch = dg.define_asset_job(
    "evaluation_batch", selection=[trials, assessments], partitions_def=batches
)

BATCH_JOBS = {"execute": execution_batch, "eval": evaluation_batch}
TERMINAL_ASSETS = {"execute": "trials", "eval": "assessments"}
