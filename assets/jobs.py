"""Jobs the gate sensor launches: one run per batch, the selection set by the plan kind.

A batch job runs the policy binding, then the batch step (`assets/batch.py`) with the
kind's assets selected, in one process: a process per step would pay the code location's
start-up again for nothing (several CPU seconds: it imports torch). Every job here runs
in one process, the run's spec too, which the run's first batch waits for."""

import dagster as dg

from assets.partitions import batches, runs
from assets.run_spec import run_spec
from assets.warm_start import warm_start

# Each kind's assets in the order a batch materializes them; the last one completes it.
BATCH_ASSETS = {
    kind: [dg.AssetKey(name) for name in names]
    for kind, names in {
        "execute": ["policy", "trials"],
        "eval": ["policy", "trials", "assessments"],
        "train": [
            "policy",
            "trials",
            "assessments",
            "qualified_groups",
            "datums",
            "policy_update",
            "checkpoints",
        ],
    }.items()
}

pin_run_spec = dg.define_asset_job(
    "pin_run_spec",
    selection=[run_spec],
    partitions_def=runs,
    executor_def=dg.in_process_executor,
)
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
TERMINAL_ASSETS = {kind: keys[-1].to_user_string() for kind, keys in BATCH_ASSETS.items()}
