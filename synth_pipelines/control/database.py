"""One SQLAlchemy engine per database URL: SQLite by default, PostgreSQL in production."""

from __future__ import annotations

import os
import weakref
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

from synth_pipelines.config import Settings
from synth_pipelines.control.schema import metadata

# PostgreSQL advisory lock ids, one per step that processes must take one at a time.
SCHEMA_LOCK = 0x73796E7468_01
EVENT_ORDER_LOCK = 0x73796E7468_02


def hold_lock(conn: Connection, lock_id: int) -> None:
    """Hold `lock_id` until the transaction ends. SQLite needs none: its write lock is
    already held from a transaction's first write until it commits."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:lock_id)"), {"lock_id": lock_id})


def _configure_sqlite(engine: Engine) -> None:
    # Several processes (CLI, daemon, run workers, proxy) write the same file.
    @event.listens_for(engine, "connect")
    def _pragmas(connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()


_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        _configure_sqlite(engine)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    create_tables(engine)
    _engines.add(engine)
    return engine


def _forget_inherited_connections() -> None:
    """A forked child (the proxy's workers) keeps its parent's engines but must not use
    the connections the parent opened, which the parent goes on using: it opens its own."""
    for engine in _engines:
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_inherited_connections)


def create_tables(engine: Engine) -> None:
    """Create missing tables. Every service does this at start-up against the same
    database; on PostgreSQL two concurrent CREATE TABLEs of one name collide, so one
    process at a time checks and creates. SQLite runs DDL outside the transaction, so two
    processes can both find a table missing and the second one's CREATE fails: it looks
    again, and finds the table the first one made."""
    for attempt in range(len(metadata.tables)):
        try:
            with engine.begin() as conn:
                hold_lock(conn, SCHEMA_LOCK)
                metadata.create_all(conn)
            return
        except OperationalError as error:
            if "already exists" not in str(error) or attempt == len(metadata.tables) - 1:
                raise


def control_engine(config: Settings) -> Engine:
    """The control database `config` names."""
    return engine_for(config.control_database_url)
