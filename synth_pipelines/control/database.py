"""One SQLAlchemy engine per database URL: SQLite by default, PostgreSQL in production."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event

from synth_pipelines.config import settings
from synth_pipelines.control.schema import metadata


def _configure_sqlite(engine: Engine) -> None:
    # Several processes (CLI, daemon, run workers, proxy) write the same file.
    @event.listens_for(engine, "connect")
    def _pragmas(connection, _record) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        _configure_sqlite(engine)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    metadata.create_all(engine)
    return engine


def control_engine() -> Engine:
    return engine_for(settings().control_database_url)
