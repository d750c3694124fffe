"""Every service creates the control tables at start-up against the same database; two
doing it at once must both start."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, event, inspect

from synth_pipelines.control.database import create_tables
from synth_pipelines.control.schema import metadata


def test_a_table_made_by_another_process_meanwhile_does_not_fail_start_up(tmp_path: Path):
    """On SQLite the check for a missing table and its CREATE are not one transaction:
    another process can create the table in between. Here that other process is a second
    engine creating the table right before this one's CREATE runs."""
    url = f"sqlite:///{tmp_path / 'control.db'}"
    engine, other = create_engine(url), create_engine(url)
    table = metadata.tables["runs"]
    raced: list[bool] = []

    def create_it_first(target, connection, **kwargs) -> None:
        if not raced:
            raced.append(True)
            table.create(other)

    event.listen(table, "before_create", create_it_first)
    try:
        create_tables(engine)
    finally:
        event.remove(table, "before_create", create_it_first)
    assert raced == [True]
    assert set(inspect(engine).get_table_names()) >= set(metadata.tables)


def test_a_database_made_before_organizations_gets_their_columns(tmp_path: Path):
    """Runs and leases recorded before organizations were: the columns are added at
    start-up, and the runs already there are the local organization's."""
    from sqlalchemy import MetaData, Table, text

    url = f"sqlite:///{tmp_path / 'control.db'}"
    engine = create_engine(url)
    older = MetaData()
    for table in (metadata.tables["runs"], metadata.tables["admission_leases"]):
        kept = [
            column.copy() for column in table.columns if column.name not in ("org", "admitted_at")
        ]
        Table(table.name, older, *kept)
    older.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, owner, idempotency_key, request_digest, kind, status,"
                " batch_count, spec_json, created_at, updated_at) VALUES ('r-old', 'alice', 'k',"
                " 'd', 'eval', 'running', 1, '{}', '2026-01-01', '2026-01-01')"
            )
        )
    create_tables(engine)
    create_tables(engine)
    columns = {column["name"] for column in inspect(engine).get_columns("runs")}
    assert {"org", "admitted_at"} <= columns
    assert "org" in {column["name"] for column in inspect(engine).get_columns("admission_leases")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT org, admitted_at FROM runs")).one() == ("local", None)
