"""Regrades of a run: who assesses its retained work again, and through which backfill."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import Engine, func, insert, select, update

from synth_pipelines.contracts.regrade import Regrade
from synth_pipelines.control.events import append_event
from synth_pipelines.control.schema import evidence_calls, regrades


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
    return Regrade.model_validate(row, from_attributes=True)


def run_regrades(engine: Engine, run_id: str) -> list[Regrade]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(regrades).where(regrades.c.run_id == run_id).order_by(regrades.c.created_at)
        ).all()
    return [Regrade.model_validate(row, from_attributes=True) for row in rows]
