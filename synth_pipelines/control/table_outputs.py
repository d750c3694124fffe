"""Which stored table is the current value of an asset partition.

Table objects are immutable; re-materializing a partition (a regrade, a retry) adds a
new object and a new row here, and readers take the newest row. Storing a batch's trials
or assessments also re-tallies that batch's results (`control/batch_results.py`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from sqlalchemy import Engine, insert, select

from synth_pipelines.contracts.table import parquet_to_table, table_to_parquet
from synth_pipelines.control.batch_results import BatchResults, record_batch_results
from synth_pipelines.control.schema import asset_outputs
from synth_pipelines.storage.objectstore import ObjectRef, ObjectStore, sha256_hex

BATCH_TABLES = ("trials", "assessments")


class TableMissingError(LookupError):
    pass


def store_table(
    engine: Engine, store: ObjectStore, asset: str, partition: str, table: pa.Table
) -> ObjectRef:
    data = table_to_parquet(table)
    ref = store.put(f"tables/{asset}/{partition}/{sha256_hex(data)}.parquet", data)
    with engine.begin() as conn:
        conn.execute(
            insert(asset_outputs).values(
                asset=asset,
                partition=partition,
                object_key=ref.key,
                sha256=ref.sha256,
                size=ref.size,
                rows=table.num_rows,
                created_at=datetime.now(UTC),
            )
        )
    if asset in BATCH_TABLES:
        tally_batch(engine, store, partition)
    return ref


def tally_batch(
    engine: Engine, store: ObjectStore, partition: str, *, replace: bool = True
) -> BatchResults | None:
    """Re-tally a batch from its current tables; None while it has no trials table. A
    reader passes `replace=False`: its tally only fills in a batch that has none."""
    try:
        trials = load_table(engine, store, "trials", partition)
    except TableMissingError:
        return None
    try:
        assessments = load_table(engine, store, "assessments", partition)
    except TableMissingError:
        assessments = None
    return record_batch_results(engine, partition, trials, assessments, replace=replace)


def current_table_ref(engine: Engine, asset: str, partition: str) -> ObjectRef | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(asset_outputs)
            .where(asset_outputs.c.asset == asset, asset_outputs.c.partition == partition)
            .order_by(asset_outputs.c.id.desc())
            .limit(1)
        ).first()
    return ObjectRef(row.object_key, row.sha256, row.size) if row else None


def load_table(engine: Engine, store: ObjectStore, asset: str, partition: str) -> pa.Table:
    """The current table of a partition, its bytes verified against the recorded sha256."""
    ref = current_table_ref(engine, asset, partition)
    if ref is None:
        raise TableMissingError(f"no stored {asset} table for partition {partition!r}")
    return parquet_to_table(store.get(ref.key, expected_sha256=ref.sha256))


def table_history(engine: Engine, asset: str, partition: str) -> list[ObjectRef]:
    """Every stored version of a partition's table, oldest first (regrades add versions)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(asset_outputs)
            .where(asset_outputs.c.asset == asset, asset_outputs.c.partition == partition)
            .order_by(asset_outputs.c.id)
        ).all()
    return [ObjectRef(row.object_key, row.sha256, row.size) for row in rows]
