"""Jobs the gate sensor launches: one run per batch, the selection set by the plan kind.

A batch runs all its steps in one process: the steps are sequential anyway, a process
per step would pay the code location's start-up again, and in a training batch the
update that ready groups started while others sampled must be completed by the optimizer
step of the same batch."""

import dagster as dg

from assets.assessments import assessments
from assets.learning import checkpoints, datums, policy_update, qualified_groups
from assets.partitions import batches, runs
from assets.policy import policy
from assets.run_spec import run_spec
from assets.trials import trials
from assets.warm_start import warm_start

# Each kind's assets in the order a batch materializes them; the last one completes it.
BATCH_ASSETS = {
    "execute": [policy, trials],
    "eval": [policy, trials, assessments],
    "train": [policy, trials, assessments, qualified_groups, datums, policy_update, checkpoints],
}

pin_run_spec = dg.define_asset_job("pin_run_spec", selection=[run_spec], partitions_def=runs)
BATCH_JOBS = {
    kind: dg.define_asset_job(
        name,
        selection=BATCH_ASSETS[kind],
        partitions_def=batches,
        executor_def=dg.in_process_executor,
    )
    for kind, name in (
        ("execute", "execution_batch"),
        ("eval", "evaluation_batch"),
        ("train", "training_batch"),
    )
}
# A warm start is one step per run, not per batch: it samples nothing.
warm_start_job = dg.define_asset_job(
    "warm_start_job",
    selection=[warm_start],
    partitions_def=runs,
    executor_def=dg.in_process_executor,
)
TERMINAL_ASSETS = {kind: assets[-1].key.to_user_string() for kind, assets in BATCH_ASSETS.items()}
