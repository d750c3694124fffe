"""Ordered run events: append-only, read from a cursor (the global sequence number)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select

from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.control.database import EVENT_ORDER_LOCK, hold_lock
from synth_pipelines.control.schema import run_events


def append_event(conn: Connection, run_id: str, kind: str, data: dict[str, Any]) -> int:
    # Readers resume after the last seq they saw, so seqs must become visible in order.
    # A PostgreSQL sequence hands out numbers at insert, not at commit: without the lock
    # a later seq could commit first and a reader would step over the earlier one.
    hold_lock(conn, EVENT_ORDER_LOCK)
    result = conn.execute(
        insert(run_events).values(
            run_id=run_id,
            kind=kind,
            data_json=json.dumps(data, sort_keys=True),
            created_at=datetime.now(UTC),
        )
    )
    key = result.inserted_primary_key
    assert key is not None, "a single-row insert has a primary key"
    return int(key[0])


def record_event(engine: Engine, run_id: str, kind: str, data: dict[str, Any]) -> int:
    with engine.begin() as conn:
        return append_event(conn, run_id, kind, data)


def read_events(
    engine: Engine,
    *,
    run_id: str | None = None,
    after: int = 0,
    kinds: tuple[str, ...] = (),
    limit: int = 1000,
) -> list[RunEvent]:
    query = select(run_events).where(run_events.c.seq > after)
    if run_id is not None:
        query = query.where(run_events.c.run_id == run_id)
    if kinds:
        query = query.where(run_events.c.kind.in_(kinds))
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(run_events.c.seq).limit(limit)).all()
    return [RunEvent.model_validate(row, from_attributes=True) for row in rows]


def last_seq(engine: Engine, run_id: str) -> int:
    """The seq of the run's latest event (0 for none): a cursor after everything so far."""
    with engine.connect() as conn:
        seq = conn.execute(
            select(func.max(run_events.c.seq)).where(run_events.c.run_id == run_id)
        ).scalar()
    return int(seq or 0)
