"""One SQLAlchemy engine per database URL: SQLite by default, PostgreSQL in production."""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.schema import CreateColumn

from synth_pipelines.config import Settings
from synth_pipelines.control.schema import ADDED_COLUMNS, metadata

# PostgreSQL advisory lock ids, one per step that processes must take one at a time.
SCHEMA_LOCK = 0x73796E7468_01
EVENT_ORDER_LOCK = 0x73796E7468_02
RUN_ADMISSION_LOCK = 0x73796E7468_03


def named_lock(what: str) -> int:
    """The advisory lock id of one named thing (a pool, an organization, a run's
    completions): a lock per thing rather than one for all of its kind."""
    return int.from_bytes(hashlib.sha256(what.encode()).digest()[:8], signed=True)


def hold_lock(conn: Connection, lock_id: int) -> None:
    """Hold `lock_id` until the transaction ends. SQLite needs none: its write lock is
    already held from a transaction's first write until it commits."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:lock_id)"), {"lock_id": lock_id})


@contextmanager
def exclusive_transaction(engine: Engine, *lock_ids: int) -> Iterator[Connection]:
    """A transaction that no other one holding any of `lock_ids` interleaves with, from
    its first statement on: on SQLite the database's write lock (every such transaction
    excludes every other), on PostgreSQL the advisory locks, taken in the order given."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            # A deferred transaction that reads before it writes can lose its snapshot to
            # a concurrent writer; taking the write lock first makes it wait instead.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        for lock_id in lock_ids:
            hold_lock(conn, lock_id)
        # An error leaves without committing: closing the connection rolls back.
        yield conn
        conn.commit()


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


def _add_missing_columns(conn: Connection) -> None:
    """Add the columns of `ADDED_COLUMNS` that a database made before them lacks."""
    inspector = inspect(conn)
    for column in ADDED_COLUMNS:
        table = column.table.name
        if column.name not in {found["name"] for found in inspector.get_columns(table)}:
            definition = CreateColumn(column).compile(dialect=conn.dialect)
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {definition}"))


def create_tables(engine: Engine) -> None:
    """Create missing tables and added columns. Every service does this at start-up
    against the same database; on PostgreSQL two concurrent CREATE TABLEs of one name
    collide, so one process at a time checks and creates. SQLite runs DDL outside the
    transaction, so two processes can both find a table or column missing and the second
    one's CREATE or ALTER fails: it looks again, and finds what the first one made."""
    tries = len(metadata.tables) + len(ADDED_COLUMNS)
    for attempt in range(tries):
        try:
            with engine.begin() as conn:
                hold_lock(conn, SCHEMA_LOCK)
                metadata.create_all(conn)
                _add_missing_columns(conn)
            return
        except OperationalError as error:
            raced = "already exists" in str(error) or "duplicate column" in str(error)
            if not raced or attempt == tries - 1:
                raise


def control_engine(config: Settings) -> Engine:
    """The control database `config` names."""
    return engine_for(config.control_database_url)
