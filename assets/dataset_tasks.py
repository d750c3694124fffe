"""`dataset_tasks[name@version]`: the ordered task list of an immutable dataset version.

`synth dataset publish` writes it (the task packages, the version record and this
table) and reports the materialization, so the asset is declared here as an external
asset rather than computed by a Dagster run.
"""

import dagster as dg

from assets.partitions import dataset_versions

dataset_tasks = dg.AssetSpec(
    "dataset_tasks",
    partitions_def=dataset_versions,
    description="Immutable dataset versions: ordered tasks pinned by Harbor content digest.",
    group_name="inputs",
    kinds={"parquet"},
).with_io_manager_key("table_io")
