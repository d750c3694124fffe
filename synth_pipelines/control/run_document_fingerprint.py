"""What `synth run show --json` of a run is computed from, reduced to one digest.

The document is built from the run's record, its stop events (the stop cause), its
batches' tallies and its policy updates, with the object store's address and the address of
the Dagster UI its link is on, by the code of the platform's CLI, control, contracts and
runtime packages. The digest covers every one of those, so a stored document whose digest
still matches is exactly what a fresh read would print.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from sqlalchemy import Connection, text

from synth_pipelines.contracts.run_record import RunRecord

PACKAGE = Path(__file__).resolve().parent.parent
CODE = ("cli", "control", "contracts", "runtime")
"""The packages whose code builds the document: a changed line invalidates every copy."""

STOP_EVENTS = ("run.interrupted", "run.failed")
"""The only events the document reads: an attempt finishing changes nothing in it until its
batch's tally is stored, so a run under way is answered from the kept document between
batches."""

# Built once, as every poll of a run's results runs them.
QUERIES = tuple(
    text(query)
    for query in (
        "SELECT max(seq) FROM run_events WHERE run_id = :run AND kind IN ("
        + ", ".join(f"'{kind}'" for kind in STOP_EVENTS)
        + ")",
        "SELECT batch_index, recorded_at FROM batch_results WHERE run_id = :run "
        "ORDER BY batch_index",
        "SELECT * FROM policy_updates WHERE run_id = :run ORDER BY batch",
    )
)


@functools.cache
def code_digest() -> str:
    """The digest of the code this process loaded: read once, since a file changed on disk
    later does not change what the process runs."""
    digest = hashlib.sha256()
    for package in CODE:
        for source in sorted((PACKAGE / package).glob("*.py")):
            digest.update(source.name.encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def run_document_fingerprint(
    conn: Connection, run: RunRecord, objects_url: str, dagster_ui_url: str
) -> str:
    """The digest of everything the run's document reads, `run` being its record as the
    caller found it (a record read before the rest is at worst older, so a document built
    after this is never kept under a fingerprint newer than what it holds)."""
    digest = hashlib.sha256(
        f"{code_digest()}\n{objects_url}\n{dagster_ui_url}\n{run.model_dump_json()}\n".encode()
    )
    for query in QUERIES:
        rows = conn.execute(query, {"run": run.run_id}).all()
        digest.update(repr([tuple(row) for row in rows]).encode())
    return digest.hexdigest()
