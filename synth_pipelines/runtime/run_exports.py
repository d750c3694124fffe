"""A run's table exported as a file into the object store, under the run, for its owner
to download (`synth run export`).

The table is built and uploaded in a process of its own (`python -m
synth_pipelines.runtime.run_exports`, the job on stdin and its outcome on stdout as JSON):
a run's evidence can be far larger than any control request, and the process that asks
for the export (the gateway) holds control requests only. The file goes from disk to the
store a piece at a time."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine

from synth_pipelines.contracts.run_export import ExportedTable, FileFormat, TableName
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.runtime.run_tables import READERS, EvidenceUnreadableError, write_table
from synth_pipelines.storage.objectstore import ObjectRef, ObjectStore, file_sha256

MODULE = "synth_pipelines.runtime.run_exports"
"""The module a process exporting a table runs."""


class ExportJob(BaseModel):
    """What to export, and where the run and its evidence are."""

    model_config = ConfigDict(extra="forbid")

    database_url: str
    objects_url: str
    s3_endpoint_url: str | None
    run_id: str
    what: TableName
    format: FileFormat


class ExportOutcome(BaseModel):
    """The exported table and the object that holds it, or why there is none."""

    exported: ExportedTable | None = None
    stored: ObjectRef | None = None
    unreadable: str | None = None
    """The evidence failed its integrity check: nothing was exported."""


def export_table(
    engine: Engine, store: ObjectStore, run: RunRecord, what: TableName, file_format: FileFormat
) -> tuple[ExportedTable, ObjectRef]:
    """The table as written, stored under the run by its SHA-256: the same export asked
    for again is the same object. `EvidenceUnreadableError` if the evidence fails its
    integrity check."""
    table = READERS[what](engine, store, run)
    exported = ExportedTable(
        run_id=run.run_id,
        what=what,
        format=file_format,
        rows=table.num_rows,
        columns=table.column_names,
    )
    with tempfile.TemporaryDirectory(prefix="synth-export-") as scratch:
        written = Path(scratch) / f"{what}.{file_format}"
        write_table(table, written, file_format)
        del table
        sha256 = file_sha256(written)
        key = f"runs/{run.run_id}/exports/{what}-{sha256}.{file_format}"
        return exported, store.put_file(key, written, sha256)


def run_job(job: ExportJob) -> ExportOutcome:
    from synth_pipelines.control.database import engine_for
    from synth_pipelines.control.runs import get_run
    from synth_pipelines.storage.objectstore import open_object_store

    engine = engine_for(job.database_url)
    store = open_object_store(job.objects_url, endpoint_url=job.s3_endpoint_url)
    try:
        exported, stored = export_table(
            engine, store, get_run(engine, job.run_id), job.what, job.format
        )
    except EvidenceUnreadableError as unreadable:
        return ExportOutcome(unreadable=str(unreadable))
    return ExportOutcome(exported=exported, stored=stored)


if __name__ == "__main__":
    outcome = run_job(ExportJob.model_validate_json(sys.stdin.read()))
    sys.stdout.write(outcome.model_dump_json())
