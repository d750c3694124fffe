"""Revoked scoped tokens: a token whose attempt has ended is refused, whatever its expiry.

The runtime revokes an attempt's token when the attempt's agent run ends (however it
ends); the proxy refuses a revoked token at authentication and, again, right before it
stages a call's evidence, so that a call still in flight when its attempt ends records
nothing. A row is kept until its token would have expired anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.control.schema import token_revocations


@dataclass(frozen=True)
class Revocation:
    sequence: int
    token_id: str
    reason: str
    expires_at: int


def revoke_token(engine: Engine, claims: TokenClaims, reason: str) -> None:
    """Refuse `claims`' token from now on; revoking it twice keeps the first reason."""
    row = {
        "token_id": claims.token_id,
        "run_id": claims.run_id,
        "attempt_id": claims.attempt_id,
        "reason": reason,
        "expires_at": claims.expires_at,
        "revoked_at": datetime.now(UTC),
    }
    try:
        with engine.begin() as conn:
            # Tokens past their expiry are refused anyway: their rows can go.
            conn.execute(
                delete(token_revocations).where(token_revocations.c.expires_at < int(time.time()))
            )
            conn.execute(token_revocations.insert().values(**row))
    except IntegrityError:
        pass


def revocation_reason(engine: Engine, token_id: str) -> str | None:
    """Why the token was revoked, or None while it stands."""
    with engine.connect() as conn:
        return conn.execute(
            select(token_revocations.c.reason).where(token_revocations.c.token_id == token_id)
        ).scalar_one_or_none()


def revocations_after(engine: Engine, sequence: int) -> list[Revocation]:
    """Revocations recorded after `sequence` (0: all of them) whose tokens have not
    expired yet (an expired token is refused anyway), in order."""
    query = (
        select(
            token_revocations.c.sequence,
            token_revocations.c.token_id,
            token_revocations.c.reason,
            token_revocations.c.expires_at,
        )
        .where(token_revocations.c.sequence > sequence)
        .where(token_revocations.c.expires_at >= int(time.time()))
        .order_by(token_revocations.c.sequence)
    )
    with engine.connect() as conn:
        return [Revocation(*row) for row in conn.execute(query)]
