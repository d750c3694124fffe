"""Admission leases: one worker pool's budget, shared by every run whose attempts use it,
and each organization's limit on active attempts, shared by its attempts in every pool.

Each attempt asks for room with a lease row (waiting) and runs once the row is held.
Every decision is taken in one transaction that no other process can interleave (SQLite:
`BEGIN IMMEDIATE`; PostgreSQL: a transaction lock per pool, then one per organization),
so two processes never both take the last slot of a pool or of an organization. Rows
carry an expiry their holder keeps pushing forward; a row whose holder died stops being
renewed and the next decision in its pool deletes it (and no decision counts it after
it expired).
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from synth_pipelines.contracts.admission_lease import Lease, ResourceDemand
from synth_pipelines.contracts.plan import ResourceBudget
from synth_pipelines.control.database import exclusive_transaction, hold_lock, named_lock
from synth_pipelines.control.org_limits import limits_of
from synth_pipelines.control.schema import admission_leases, runs


class LeaseLostError(RuntimeError):
    pass


@dataclass(frozen=True)
class PoolUse:
    """What the held leases of a pool take together."""

    active: int
    cpus: float
    memory_mb: int
    storage_mb: int

    @classmethod
    def of(cls, leases: list[Lease]) -> PoolUse:
        return cls(
            active=len(leases),
            cpus=sum(lease.cpus for lease in leases),
            memory_mb=sum(lease.memory_mb for lease in leases),
            storage_mb=sum(lease.storage_mb for lease in leases),
        )

    def plus(self, demand: ResourceDemand) -> PoolUse:
        return PoolUse(
            self.active + 1,
            self.cpus + demand.cpus,
            self.memory_mb + demand.memory_mb,
            self.storage_mb + demand.storage_mb,
        )

    def within(self, limits: ResourceBudget) -> bool:
        return (
            self.active <= limits.max_active_attempts
            and self.cpus <= limits.cpus + 1e-9
            and self.memory_mb <= limits.memory_mb
            and self.storage_mb <= limits.storage_mb
        )


def _now() -> datetime:
    return datetime.now(UTC)


def active_attempts_by_org(conn: Connection, now: datetime) -> Counter[str]:
    """Each organization's held, unexpired leases, over every pool."""
    rows = conn.execute(
        select(admission_leases.c.org, func.count())
        .where(
            admission_leases.c.state == "held",
            admission_leases.c.org.is_not(None),
            admission_leases.c.expires_at >= now,
        )
        .group_by(admission_leases.c.org)
    )
    return Counter({org: count for org, count in rows})


def _leases(conn: Connection, pool: str) -> list[Lease]:
    rows = conn.execute(
        select(admission_leases)
        .where(admission_leases.c.pool == pool)
        .order_by(admission_leases.c.requested_at, admission_leases.c.lease_id)
    ).all()
    return [Lease.model_validate(row, from_attributes=True) for row in rows]


def request_lease(
    engine: Engine,
    pool: str,
    holder: str,
    demand: ResourceDemand,
    ttl: timedelta,
    *,
    run_id: str | None = None,
    attempt_id: str | None = None,
) -> str:
    """Queue a request for room in `pool`; its place in line is the time it was asked. It
    counts against the organization of `run_id`'s run."""
    lease_id = uuid.uuid4().hex
    now = _now()
    with engine.begin() as conn:
        org = (
            None
            if run_id is None
            else conn.execute(select(runs.c.org).where(runs.c.run_id == run_id)).scalar()
        )
        conn.execute(
            insert(admission_leases).values(
                lease_id=lease_id,
                pool=pool,
                holder=holder,
                run_id=run_id,
                attempt_id=attempt_id,
                org=org,
                cpus=demand.cpus,
                memory_mb=demand.memory_mb,
                storage_mb=demand.storage_mb,
                state="waiting",
                requested_at=now,
                expires_at=now + ttl,
            )
        )
    return lease_id


def try_admit(
    engine: Engine, pool: str, lease_id: str, limits: ResourceBudget, ttl: timedelta
) -> bool:
    """Hold the lease if the pool has room for it, and its organization is under its
    limit on active attempts, once every older waiting request that fits has been served
    first (first come, first served among those that fit, so a large request, or one of
    an organization at its limit, does not stop others from using what is left). A
    request still waiting is kept alive for another `ttl`."""
    with exclusive_transaction(engine, named_lock(f"admission:{pool}")) as conn:
        now = _now()
        conn.execute(
            delete(admission_leases).where(
                admission_leases.c.pool == pool, admission_leases.c.expires_at < now
            )
        )
        leases = _leases(conn, pool)
        mine = next((lease for lease in leases if lease.lease_id == lease_id), None)
        if mine is None:
            raise LeaseLostError(
                f"admission request {lease_id} in pool {pool!r} expired before it was "
                "admitted; its holder stopped renewing it for longer than the lease's ttl"
            )
        if mine.org is not None:
            # The organization's attempts in other pools are decided under those pools'
            # locks; the organization's lock makes their decisions and this one take turns.
            hold_lock(conn, named_lock(f"admission-org:{mine.org}"))
        org_limits = limits_of(conn, {lease.org for lease in leases if lease.org is not None})
        org_use = active_attempts_by_org(conn, now)

        def org_has_room(org: str | None) -> bool:
            if org is None:
                return True
            limit = org_limits[org].max_active_attempts
            return limit is None or org_use[org] < limit

        use = PoolUse.of([lease for lease in leases if lease.state == "held"])
        for ahead in leases:
            if ahead.lease_id == lease_id:
                break
            if (
                ahead.state == "waiting"
                and use.plus(ahead.demand).within(limits)
                and org_has_room(ahead.org)
            ):
                use = use.plus(ahead.demand)
                if ahead.org is not None:
                    org_use[ahead.org] += 1
        admitted = use.plus(mine.demand).within(limits) and org_has_room(mine.org)
        conn.execute(
            update(admission_leases)
            .where(admission_leases.c.lease_id == lease_id)
            .values(state="held" if admitted else "waiting", expires_at=now + ttl)
        )
        return admitted


def renew_lease(engine: Engine, lease_id: str, ttl: timedelta) -> bool:
    """Push the lease's expiry forward; False once it has been reclaimed."""
    with engine.begin() as conn:
        renewed = conn.execute(
            update(admission_leases)
            .where(admission_leases.c.lease_id == lease_id)
            .values(expires_at=_now() + ttl)
        )
    return renewed.rowcount == 1


def release_lease(engine: Engine, lease_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(admission_leases).where(admission_leases.c.lease_id == lease_id))


def pool_leases(engine: Engine, pool: str) -> list[Lease]:
    """The pool's leases, held and waiting, oldest request first; expired ones included
    until the next admission decision reclaims them."""
    with engine.connect() as conn:
        return _leases(conn, pool)
