"""Jobs the gate sensor launches: one run per batch, the selection set by the plan kind.

A training batch runs all its steps in one process, so the update that ready groups
started while others sampled is completed by the optimizer step of the same batch."""

import dagster as dg

from assets.assessments import assessments
from assets.learning import checkpoints, datums, policy_update, qualified_groups
from assets.partitions import batches, runs
from assets.policy import policy
from assets.run_spec import run_spec
from assets.trials import trials

pin_run_spec = dg.define_asset_job("pin_run_spec", selection=[run_spec], partitions_def=runs)
execution_batch = dg.define_asset_job(
    "execution_batch", selection=[policy, trials], partitions_def=batches
)
evaluation_batch = dg.define_asset_job(
    "evaluation_batch", selection=[policy, trials, assessments], partitions_def=batches
)
training_batch = dg.define_asset_job(
    "training_batch",
    selection=[policy, trials, assessments, qualified_groups, datums, policy_update, checkpoints],
    partitions_def=batches,
    executor_def=dg.in_process_executor,
)

BATCH_JOBS = {"execute": execution_batch, "eval": evaluation_batch, "train": training_batch}
TERMINAL_ASSETS = {"execute": "trials", "eval": "assessments", "train": "checkpoints"}
