"""The tokens the gateway mints for operators' own harness sessions (`synth claude`).

Each is recorded with its owner and the API key that asked for it, so that only its
owner revokes it and revoking the key revokes what it minted. Revocation itself is the
platform's one mechanism (`token_revocations.py`), which the proxy checks on every call.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from sqlalchemy import Engine, RowMapping, select

from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.control.schema import interactive_tokens
from synth_pipelines.control.token_revocations import revoke_token

SESSION_RUN = "interactive"
"""The run id of every session token: a session belongs to no run."""


def record_session(engine: Engine, claims: TokenClaims, key_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            interactive_tokens.insert().values(
                token_id=claims.token_id,
                key_id=key_id,
                owner=claims.owner,
                attempt_id=claims.attempt_id,
                model=claims.model,
                expires_at=claims.expires_at,
                created_at=datetime.now(UTC),
            )
        )


def _claims(row: RowMapping) -> TokenClaims:
    return TokenClaims(
        run_id=SESSION_RUN,
        attempt_id=row["attempt_id"],
        owner=row["owner"],
        model=row["model"],
        role="interactive",
        expires_at=row["expires_at"],
        token_id=row["token_id"],
    )


def revoke_session(engine: Engine, token_id: str, owner: str, reason: str) -> bool:
    """Revoke `owner`'s session token `token_id`; False when `owner` has none of that id."""
    with engine.connect() as conn:
        row = (
            conn.execute(
                select(interactive_tokens).where(
                    interactive_tokens.c.token_id == token_id, interactive_tokens.c.owner == owner
                )
            )
            .mappings()
            .first()
        )
    if row is None:
        return False
    revoke_token(engine, _claims(row), reason)
    return True


def revoke_sessions_of_key(engine: Engine, key_id: str, reason: str) -> int:
    """Revoke every unexpired session token `key_id` minted; how many."""
    with engine.connect() as conn:
        rows = (
            conn.execute(
                select(interactive_tokens).where(
                    interactive_tokens.c.key_id == key_id,
                    interactive_tokens.c.expires_at >= int(time.time()),
                )
            )
            .mappings()
            .all()
        )
    for row in rows:
        revoke_token(engine, _claims(row), reason)
    return len(rows)
