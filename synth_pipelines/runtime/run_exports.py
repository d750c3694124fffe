"""A run's table exported as a file into the object store, under the run, for its owner
to download (`synth run export`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import Engine

from synth_pipelines.contracts.run_export import ExportedTable, FileFormat, TableName
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.runtime.run_tables import READERS, write_table
from synth_pipelines.storage.objectstore import ObjectRef, ObjectStore, sha256_hex


def export_table(
    engine: Engine, store: ObjectStore, run: RunRecord, what: TableName, file_format: FileFormat
) -> tuple[ExportedTable, ObjectRef]:
    """The table as written, stored under the run by its SHA-256: the same export asked
    for again is the same object. `EvidenceUnreadableError` if the evidence fails its
    integrity check."""
    table = READERS[what](engine, store, run)
    with tempfile.TemporaryDirectory(prefix="synth-export-") as scratch:
        written = Path(scratch) / f"{what}.{file_format}"
        write_table(table, written, file_format)
        data = written.read_bytes()
    key = f"runs/{run.run_id}/exports/{what}-{sha256_hex(data)}.{file_format}"
    exported = ExportedTable(
        run_id=run.run_id,
        what=what,
        format=file_format,
        rows=table.num_rows,
        columns=table.column_names,
    )
    return exported, store.put(key, data)
