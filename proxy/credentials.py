"""Signed scoped tokens: minted by the runtime, checked by the proxy on every call.

A token is `sk-synth-<claims>.<signature>`: base64url JSON claims and their
HMAC-SHA256 under a key only the platform holds. Nothing in a sandbox can forge or
widen one; a token bound to one model is refused for another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from pathlib import Path

from pydantic import ValidationError

from synth_pipelines.contracts.scoped_token import TokenClaims

PREFIX = "sk-synth-"


class TokenInvalidError(Exception):
    """Unknown, malformed, forged or expired: the caller is not authenticated (401)."""


class TokenScopeError(Exception):
    """A valid token used outside its scope, e.g. for another model (403)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def load_signing_key(path: Path) -> bytes:
    """The platform's signing key, created on first use with owner-only permissions."""
    configured = os.environ.get("SYNTH_PROXY_SIGNING_KEY")
    if configured:
        return configured.encode()
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        return key
    except FileExistsError:
        return path.read_bytes()


def mint_token(
    key: bytes,
    *,
    run_id: str,
    attempt_id: str,
    owner: str,
    model: str,
    ttl_sec: int,
    role: str = "actor",
    batch: str | None = None,
) -> str:
    claims = TokenClaims(
        run_id=run_id,
        attempt_id=attempt_id,
        owner=owner,
        model=model,
        role=role,
        batch=batch,
        expires_at=int(time.time()) + ttl_sec,
        token_id=uuid.uuid4().hex,
    )
    body = _b64(claims.model_dump_json().encode())
    signature = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    return f"{PREFIX}{body}.{signature}"


def verify_token(key: bytes, token: str, *, now: float | None = None) -> TokenClaims:
    if not token.startswith(PREFIX) or token.count(".") != 1:
        raise TokenInvalidError("invalid x-api-key: not a synth scoped token")
    body, signature = token.removeprefix(PREFIX).split(".")
    expected = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(signature, expected):
        raise TokenInvalidError("invalid x-api-key: signature does not verify")
    try:
        claims = TokenClaims.model_validate(json.loads(_unb64(body)))
    except (ValueError, ValidationError):
        raise TokenInvalidError("invalid x-api-key: unreadable claims") from None
    if claims.expires_at < (time.time() if now is None else now):
        raise TokenInvalidError("invalid x-api-key: the token has expired")
    return claims


def check_model(claims: TokenClaims, model: str) -> None:
    if model != claims.model:
        raise TokenScopeError(f"this token may sample only model {claims.model!r}, not {model!r}")
