"""Organizations' admission limits, set by an admin and read where runs and attempts are
admitted (`control/run_admission.py`, `control/admission_leases.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, delete, insert, select

from synth_pipelines.contracts.org_limits import LimitsRequest, OrgLimits
from synth_pipelines.control.schema import org_limits

_COLUMNS = (org_limits.c.org, org_limits.c.max_concurrent_runs, org_limits.c.max_active_attempts)


def limits_of(conn: Connection, orgs: Iterable[str]) -> dict[str, OrgLimits]:
    """The limits of each of `orgs`, an unlimited record for those without a row."""
    wanted = set(orgs)
    rows = conn.execute(select(*_COLUMNS).where(org_limits.c.org.in_(wanted))).all()
    found = {row.org: OrgLimits.model_validate(row, from_attributes=True) for row in rows}
    return {org: found.get(org, OrgLimits(org=org)) for org in wanted}


def limited_orgs(conn: Connection) -> list[str]:
    """Every organization with a row, limited or not, by name."""
    return list(conn.execute(select(org_limits.c.org).order_by(org_limits.c.org)).scalars())


def get_limits(engine: Engine, org: str) -> OrgLimits:
    with engine.connect() as conn:
        return limits_of(conn, [org])[org]


def set_limits(engine: Engine, org: str, request: LimitsRequest, admin: str) -> OrgLimits:
    """Replace `org`'s limits; they apply from the next admission decision on."""
    with engine.begin() as conn:
        conn.execute(delete(org_limits).where(org_limits.c.org == org))
        conn.execute(
            insert(org_limits).values(
                org=org,
                **request.model_dump(),
                updated_by=admin,
                updated_at=datetime.now(UTC),
            )
        )
    return OrgLimits(org=org, **request.model_dump())
