"""`synth run show RUN --json` answered at start-up, when nothing it reads has changed.

The full command needs typer, pydantic and SQLAlchemy, whose imports alone take longer
than a researcher polling a run should wait. Every full `run show --json` keeps its
document with the fingerprint of what it read (`control/run_documents.py`); here, with
the standard library only, the same fingerprint is computed again and, if it matches,
the kept document is printed as it is. Anything else (another command, a run id prefix,
a run of another owner, a configuration this path does not read the way the settings
do, a document that is missing or stale) goes to the full command.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from synth_pipelines import state_locations
from synth_pipelines.control.run_document_fingerprint import run_document_fingerprint

EXIT_RUN_FAILED = 1
STOPPED = ("failed", "interrupted")
PREFIX = "SYNTH_"


def requested_run(argv: list[str]) -> str | None:
    """The run id of exactly `run show RUN --json` (options in either order), else None."""
    if argv[:2] != ["run", "show"] or len(argv) != 4 or "--json" not in argv[2:]:
        return None
    (run_id,) = [arg for arg in argv[2:] if arg != "--json"]
    return None if run_id.startswith("-") else run_id


def _setting(name: str) -> str | None:
    value = os.environ.get(PREFIX + name)
    return value or None


def _plainly_configured() -> bool:
    """The settings read variables case-insensitively and parse empty ones; this path reads
    only upper-case, non-empty ones, so it steps aside when any other kind is set."""
    return all(
        key.startswith(PREFIX) and value
        for key, value in os.environ.items()
        if key.upper().startswith(PREFIX)
    )


def _connect(database_url: str) -> tuple[Any, str] | None:
    if database_url.startswith("sqlite:///"):
        path = Path(database_url.removeprefix("sqlite:///"))
        if not path.is_file():
            return None
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True), "?"
    for scheme in ("postgresql+psycopg2://", "postgresql://"):
        if database_url.startswith(scheme):
            import psycopg2

            dsn = "postgresql://" + database_url.removeprefix(scheme)
            return psycopg2.connect(dsn), "%s"
    return None


def kept_document(run_id: str) -> tuple[str, str] | None:
    """The kept document and the run's status, if the document is current."""
    if not _plainly_configured():
        return None
    project_root = Path(root) if (root := _setting("PROJECT_ROOT")) else None
    data_dir = Path(data) if (data := _setting("DATA_DIR")) else None
    state = state_locations.state_dir(data_dir, project_root or state_locations.find_project_root())
    connected = _connect(state_locations.control_database_url(_setting("DATABASE_URL"), state))
    if connected is None:
        return None
    connection, marker = connected
    try:
        cursor = connection.cursor()
        cursor.execute(
            f"SELECT r.owner, r.status, d.fingerprint, d.document FROM runs r "
            f"JOIN run_documents d ON d.run_id = r.run_id WHERE r.run_id = {marker}",
            (run_id,),
        )
        row = cursor.fetchone()
        if row is None or row[0] != (_setting("OWNER") or "local"):
            return None
        objects_url = state_locations.objects_url(_setting("OBJECT_STORE_URL"), state)
        if run_document_fingerprint(cursor, marker, run_id, objects_url) != row[2]:
            return None
        return row[3], row[1]
    except Exception:
        # A database this path cannot read (not created yet, an older schema, a server
        # that refuses): the full command reads it and reports what is wrong.
        return None
    finally:
        connection.close()


def answered(argv: list[str]) -> int | None:
    """The exit code after printing the kept document, or None for the full command."""
    run_id = requested_run(argv)
    found = kept_document(run_id) if run_id is not None else None
    if found is None:
        return None
    document, status = found
    sys.stdout.write(document)
    sys.stdout.flush()
    return EXIT_RUN_FAILED if status in STOPPED else 0
