"""Ordered run events: append-only, read from a cursor (the global sequence number)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, insert, select

from synth_pipelines.control.database import EVENT_ORDER_LOCK, hold_lock
from synth_pipelines.control.schema import run_events


@dataclass(frozen=True)
class RunEvent:
    seq: int
    run_id: str
    kind: str
    data: dict[str, Any]
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "run_id": self.run_id,
            "kind": self.kind,
            "data": self.data,
            "created_at": self.created_at.isoformat(),
        }


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


def _event(row: Row[Any]) -> RunEvent:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return RunEvent(row.seq, row.run_id, row.kind, json.loads(row.data_json), created)


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
    return [_event(row) for row in rows]
