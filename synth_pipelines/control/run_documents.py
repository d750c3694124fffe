"""The last `synth run show --json` document of each run, kept with the fingerprint of
what it was built from (`run_document_fingerprint.py`), so that the next identical read
is answered without building it again."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite

from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.run_document_fingerprint import run_document_fingerprint
from synth_pipelines.control.schema import run_documents

# Built once: every poll of a run's results runs it.
_KEPT = select(run_documents.c.document).where(
    run_documents.c.run_id == bindparam("run_id"),
    run_documents.c.fingerprint == bindparam("fingerprint"),
)


def kept_document(
    conn: Connection, run: RunRecord, objects_url: str, dagster_ui_url: str
) -> tuple[str, str | None]:
    """The fingerprint of what the run's document reads now, and the kept document if it
    was built from exactly that. Fingerprint first, then read: a change made while this
    reads leaves the kept document marked older than what it holds, so it is built again,
    never served stale."""
    fingerprint = run_document_fingerprint(conn, run, objects_url, dagster_ui_url)
    row = conn.execute(_KEPT, {"run_id": run.run_id, "fingerprint": fingerprint}).first()
    return fingerprint, None if row is None else str(row.document)


def store_run_document(engine: Engine, run_id: str, fingerprint: str, text: str) -> None:
    values = {"fingerprint": fingerprint, "document": text, "stored_at": datetime.now(UTC)}
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(run_documents).values(run_id=run_id, **values)
    statement = statement.on_conflict_do_update(index_elements=["run_id"], set_=values)
    with engine.begin() as conn:
        conn.execute(statement)
