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
