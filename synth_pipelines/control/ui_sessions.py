"""Sign-ins to the Dagster UI through the gateway, without a key in any URL.

An admin's key asks for a login link: a random token, good once and for a short while.
Visiting it trades the token for a session cookie bound to the key's id. Both are kept
only as their SHA-256 (each is 256 random bits, so no secret key is needed to make a copy
of the table useless), and the key the cookie acts as is looked up again on every request,
so a revoked key ends its UI sessions at their next request.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import UTC, datetime

from sqlalchemy import Engine, select, update

from synth_pipelines.control.schema import ui_sessions


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_login(engine: Engine, key_id: str, ttl_sec: float) -> tuple[str, float]:
    """A new login token for `key_id` and when it expires (seconds since the epoch)."""
    token, expires_at = secrets.token_urlsafe(32), time.time() + ttl_sec
    with engine.begin() as conn:
        conn.execute(
            ui_sessions.insert().values(
                login_digest=_digest(token),
                key_id=key_id,
                login_expires_at=expires_at,
                cookie_digest=None,
                expires_at=None,
                created_at=datetime.now(UTC),
            )
        )
    return token, expires_at


def redeem_login(engine: Engine, token: str, ttl_sec: float) -> str | None:
    """The session cookie `token` is traded for, lasting `ttl_sec`; None when the token is
    unknown, expired or already used."""
    cookie, now = secrets.token_urlsafe(32), time.time()
    # One conditional update: of two visits at once, only one finds the cookie unset.
    with engine.begin() as conn:
        traded = conn.execute(
            update(ui_sessions)
            .where(
                ui_sessions.c.login_digest == _digest(token),
                ui_sessions.c.cookie_digest.is_(None),
                ui_sessions.c.login_expires_at > now,
            )
            .values(cookie_digest=_digest(cookie), expires_at=now + ttl_sec)
        )
    return cookie if traded.rowcount == 1 else None


def session_key_id(engine: Engine, cookie: str) -> str | None:
    """The key id the session cookie acts as, while the session lasts."""
    with engine.connect() as conn:
        found: str | None = conn.execute(
            select(ui_sessions.c.key_id).where(
                ui_sessions.c.cookie_digest == _digest(cookie),
                ui_sessions.c.expires_at > time.time(),
            )
        ).scalar()
    return found
