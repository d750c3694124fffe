"""What `GET /v1/pool` answers: a worker pool's budget, use and leases, and for every
organization with limits, runs or leases, what it may hold, holds and waits for; narrowed
to one organization, its leases and its row only, the pool's budget and use as a whole."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select

from synth_pipelines.contracts.admission_lease import Lease
from synth_pipelines.contracts.plan import ResourceBudget
from synth_pipelines.contracts.pool import LeaseView, OrgAdmission, PoolDocument, PoolUsage
from synth_pipelines.control.admission_leases import PoolUse, active_attempts_by_org, pool_leases
from synth_pipelines.control.org_limits import limited_orgs, limits_of
from synth_pipelines.control.run_admission import HOLDS_A_SLOT, WAITS_IN_LINE, runs_by_org
from synth_pipelines.control.schema import admission_leases


def _view(lease: Lease, now: datetime) -> LeaseView:
    return LeaseView(**lease.model_dump(), expired=lease.expires_at < now)


def pool_document(
    engine: Engine, pool: str, limits: ResourceBudget, only_org: str | None
) -> PoolDocument:
    """The pool's document: every organization's leases and rows, or with `only_org`
    that organization's only."""
    now = datetime.now(UTC)
    leases = pool_leases(engine, pool)
    held = [lease for lease in leases if lease.state == "held"]
    use = PoolUse.of(held)
    with engine.connect() as conn:
        running = runs_by_org(conn, HOLDS_A_SLOT)
        queued = runs_by_org(conn, WAITS_IN_LINE)
        active = active_attempts_by_org(conn, now)
        waiting_attempts = Counter(
            {
                org: count
                for org, count in conn.execute(
                    select(admission_leases.c.org, func.count())
                    .where(
                        admission_leases.c.state == "waiting", admission_leases.c.expires_at >= now
                    )
                    .group_by(admission_leases.c.org)
                )
                if org is not None
            }
        )
        orgs = sorted(
            set(limited_orgs(conn))
            | set(running)
            | set(queued)
            | set(active)
            | set(waiting_attempts)
        )
        if only_org is not None:
            orgs = [org for org in orgs if org == only_org]
        limits_by_org = limits_of(conn, orgs)
    shown = [lease for lease in leases if only_org in (None, lease.org)]
    return PoolDocument(
        pool=pool,
        limits=limits,
        use=PoolUsage(
            active_attempts=use.active,
            cpus=use.cpus,
            memory_mb=use.memory_mb,
            storage_mb=use.storage_mb,
        ),
        held=[_view(lease, now) for lease in shown if lease.state == "held"],
        waiting=[_view(lease, now) for lease in shown if lease.state == "waiting"],
        orgs=[
            OrgAdmission(
                limits=limits_by_org[org],
                running_runs=running.get(org, []),
                queued_runs=queued.get(org, []),
                active_attempts=active[org],
                waiting_attempts=waiting_attempts[org],
            )
            for org in orgs
        ],
    )
