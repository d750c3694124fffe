"""The proxy reports each published evidence chunk to Dagster, in its batch's partition."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from resources.captured_interactions_events import DagsterReporter
from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store
from tests.evidence_calls import interaction

BATCH = "r-1.b0000"
UNKNOWN_BATCH = "r-1.b0009"


def _materializations(batch: str) -> list[dg.AssetMaterialization]:
    with dg.DagsterInstance.get() as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey("captured_interactions"), asset_partitions=[batch]
            ),
            limit=100,
        ).records
    return [record.asset_materialization for record in records]


def test_each_published_chunk_is_a_materialization_of_its_batch_partition(state: Path):
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("batches", [BATCH])
    reporter = DagsterReporter(Settings().dagster_home)
    publisher = EvidencePublisher(
        Spool(state / "spool"),
        open_object_store(Settings().objects_url),
        control_engine(Settings()),
        report=reporter,
    )
    staged = [
        ("a-1", 0, BATCH),
        ("a-1", 1, BATCH),
        ("a-2", 0, BATCH),
        ("a-3", 0, UNKNOWN_BATCH),
        ("a-4", 0, None),
    ]
    for attempt, index, batch in staged:
        call = interaction(f"{attempt}-{index}", attempt=attempt, call_index=index)
        publisher.spool.stage(call.model_copy(update={"batch": batch}))

    chunks = publisher.publish_pending(everything=True)
    reporter.close()

    assert sorted((chunk.attempt_id, chunk.batch, chunk.calls) for chunk in chunks) == [
        ("a-1", BATCH, 2),
        ("a-2", BATCH, 1),
        ("a-3", UNKNOWN_BATCH, 1),
        ("a-4", None, 1),
    ]
    reported = {
        materialization.metadata["chunk"].value: materialization
        for materialization in _materializations(BATCH)
    }
    expected = {chunk.chunk_key: chunk for chunk in chunks if chunk.batch == BATCH}
    assert reported.keys() == expected.keys()
    for key, chunk in expected.items():
        metadata = reported[key].metadata
        assert reported[key].partition == BATCH
        assert metadata["sha256"].value == chunk.sha256
        assert metadata["calls"].value == chunk.calls
        assert metadata["attempt"].value == chunk.attempt_id
    # Evidence of a batch Dagster does not know is published, not reported.
    assert _materializations(UNKNOWN_BATCH) == []
