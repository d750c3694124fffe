"""Operators' API keys: created by an admin, checked on every request, revoked at once.

A key is `synth_<key id>_<secret>`. The table keeps the key id in the clear (to find the
row, list and revoke) and the HMAC-SHA256 of the secret under the gateway's own secret
(`credentials.load_secret`), compared in constant time: whoever reads the database
cannot present a key, and a key is refused the moment its row says revoked or expired.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, bindparam, select, update

from synth_pipelines.contracts.operator_key import CreatedKey, KeyRequest, OperatorKey
from synth_pipelines.control.schema import operator_keys

KEY_PREFIX = "synth"
_COLUMNS = [column for column in operator_keys.c if column.name != "secret_digest"]
# Built once: every request of the gateway runs it, and a statement built per call costs
# more to construct and to key into the compiled cache than the lookup itself.
_PRESENTED = select(*_COLUMNS, operator_keys.c.secret_digest).where(
    operator_keys.c.key_id == bindparam("key_id")
)


class KeyRefusedError(Exception):
    """A presented key that does not authenticate anyone; the message says why."""


class KeyNotFoundError(LookupError):
    pass


def _digest(server_secret: bytes, secret: str) -> str:
    return hmac.new(server_secret, secret.encode(), hashlib.sha256).hexdigest()


def create_key(
    engine: Engine, server_secret: bytes, request: KeyRequest, *, now: datetime | None = None
) -> CreatedKey:
    """A new key for `request`; its secret is in the result and nowhere else."""
    now = now or datetime.now(UTC)
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    expires_at = (
        None if request.expires_in_sec is None else now + timedelta(seconds=request.expires_in_sec)
    )
    row = {
        "key_id": key_id,
        "owner": request.owner,
        "org": request.org,
        "role": request.role,
        "created_at": now,
        "expires_at": expires_at,
        "revoked_at": None,
    }
    with engine.begin() as conn:
        conn.execute(
            operator_keys.insert().values(**row, secret_digest=_digest(server_secret, secret))
        )
    return CreatedKey(key=OperatorKey.model_validate(row), secret=f"{KEY_PREFIX}_{key_id}_{secret}")


def authenticate(
    conn: Connection, server_secret: bytes, presented: str, *, now: datetime | None = None
) -> OperatorKey:
    """The key `presented` is, if it stands now; otherwise `KeyRefusedError` saying why
    (never whether a key id exists when the secret is wrong). On the caller's connection:
    a request that reads more takes one connection from the pool, not one per lookup."""
    prefix, _, rest = presented.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not key_id or not secret:
        raise KeyRefusedError("the API key is malformed: it should look like synth_<id>_<secret>")
    row = conn.execute(_PRESENTED, {"key_id": key_id}).first()
    expected = row.secret_digest if row is not None else _digest(server_secret, "")
    if not hmac.compare_digest(expected, _digest(server_secret, secret)) or row is None:
        raise KeyRefusedError("the API key is not valid")
    key = OperatorKey.model_validate(row, from_attributes=True)
    refused = key.refusal(now or datetime.now(UTC))
    if refused is not None:
        raise KeyRefusedError(refused)
    return key


def standing_key(engine: Engine, key_id: str, *, now: datetime | None = None) -> OperatorKey:
    """The key `key_id`, if it stands now (a session made with it acts as it); otherwise
    `KeyRefusedError` saying why."""
    with engine.connect() as conn:
        row = conn.execute(select(*_COLUMNS).where(operator_keys.c.key_id == key_id)).first()
    if row is None:
        raise KeyRefusedError(f"API key {key_id} no longer exists")
    key = OperatorKey.model_validate(row, from_attributes=True)
    refused = key.refusal(now or datetime.now(UTC))
    if refused is not None:
        raise KeyRefusedError(refused)
    return key


def list_keys(engine: Engine, *, owner: str | None = None) -> list[OperatorKey]:
    """Every key (or `owner`'s), newest first, revoked and expired ones included."""
    query = select(*_COLUMNS).order_by(operator_keys.c.created_at.desc())
    if owner is not None:
        query = query.where(operator_keys.c.owner == owner)
    with engine.connect() as conn:
        return [
            OperatorKey.model_validate(row, from_attributes=True) for row in conn.execute(query)
        ]


def revoke_key(engine: Engine, key_id: str, *, now: datetime | None = None) -> OperatorKey:
    """Revoke `key_id` from now on (a second revocation keeps the first moment)."""
    with engine.begin() as conn:
        conn.execute(
            update(operator_keys)
            .where(operator_keys.c.key_id == key_id, operator_keys.c.revoked_at.is_(None))
            .values(revoked_at=now or datetime.now(UTC))
        )
        row = conn.execute(select(*_COLUMNS).where(operator_keys.c.key_id == key_id)).first()
    if row is None:
        raise KeyNotFoundError(f"no API key {key_id}")
    return OperatorKey.model_validate(row, from_attributes=True)
