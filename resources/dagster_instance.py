"""The Dagster instance outside a Dagster process: its storage created before the services
start, and what the platform tells it directly (partitions and materializations it wrote
itself)."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from synth_pipelines.contracts.dataset import DatasetVersion
from synth_pipelines.storage.objectstore import ObjectRef


def create_dagster_storage(home: str) -> None:
    """Create the instance's storage before its services start: the daemon and the
    webserver, started together on a fresh home, can both stamp the schedule storage's
    schema version, after which no code server loads."""
    dg.DagsterInstance.from_config(home).dispose()


def dagster_instance(home: Path) -> dg.DagsterInstance:
    """The instance whose home is `home` (`Settings.dagster_home`)."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DAGSTER_HOME", str(home))
    return dg.DagsterInstance.get()


def report_dataset_published(
    home: Path, dataset: DatasetVersion, table: ObjectRef, table_uri: str
) -> None:
    instance = dagster_instance(home)
    if not instance.has_dynamic_partition("dataset_versions", dataset.ref):
        instance.add_dynamic_partitions("dataset_versions", [dataset.ref])
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key="dataset_tasks",
            partition=dataset.ref,
            description=dataset.description or None,
            metadata={
                "dagster/row_count": dataset.task_count,
                "digest": dataset.digest,
                "owner": dataset.owner,
                "object": dg.MetadataValue.path(table_uri),
                "sha256": table.sha256,
            },
            tags={
                "dagster/data_version": dataset.digest,
                "dagster/data_version_is_user_provided": "true",
            },
        )
    )
