"""Regrades of a run: who assesses its retained work again, and through which backfill."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, Row, func, insert, select, update

from synth_pipelines.control.events import append_event
from synth_pipelines.control.schema import evidence_calls, regrades


@dataclass(frozen=True)
class Regrade:
    regrade_id: str
    run_id: str
    assessor: str
    assessor_digest: str | None
    backfill_id: str | None
    batches: int
    evaluation_only: bool
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "created_at": self.created_at.isoformat()}


def _regrade(row: Row[Any]) -> Regrade:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return Regrade(
        row.regrade_id,
        row.run_id,
        row.assessor,
        row.assessor_digest,
        row.backfill_id,
        row.batches,
        bool(row.evaluation_only),
        created,
    )


def has_actor_evidence(engine: Engine, run_id: str) -> bool:
    """Whether the run's attempts left captured actor calls (training needs them)."""
    with engine.connect() as conn:
        count = conn.execute(
            select(func.count()).where(
                evidence_calls.c.run_id == run_id, evidence_calls.c.role == "actor"
            )
        ).scalar_one()
    return count > 0


def record_regrade(
    engine: Engine, run_id: str, assessor: str, assessor_digest: str | None, batches: int
) -> Regrade:
    regrade_id = f"rg-{uuid.uuid4().hex[:10]}"
    evaluation_only = not has_actor_evidence(engine, run_id)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            insert(regrades).values(
                regrade_id=regrade_id,
                run_id=run_id,
                assessor=assessor,
                assessor_digest=assessor_digest,
                backfill_id=None,
                batches=batches,
                evaluation_only=int(evaluation_only),
                created_at=now,
            )
        )
        append_event(
            conn,
            run_id,
            "regrade.requested",
            {"regrade_id": regrade_id, "assessor": assessor, "evaluation_only": evaluation_only},
        )
    return get_regrade(engine, regrade_id)


def attach_backfill(engine: Engine, regrade_id: str, backfill_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(regrades)
            .where(regrades.c.regrade_id == regrade_id)
            .values(backfill_id=backfill_id)
        )


def get_regrade(engine: Engine, regrade_id: str) -> Regrade:
    with engine.connect() as conn:
        row = conn.execute(select(regrades).where(regrades.c.regrade_id == regrade_id)).first()
    if row is None:
        raise LookupError(f"no regrade {regrade_id!r}")
    return _regrade(row)


def run_regrades(engine: Engine, run_id: str) -> list[Regrade]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(regrades).where(regrades.c.run_id == run_id).order_by(regrades.c.created_at)
        ).all()
    return [_regrade(row) for row in rows]
