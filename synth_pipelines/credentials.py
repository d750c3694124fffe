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
import tempfile
import time
import uuid
from pathlib import Path

from pydantic import ValidationError

from synth_pipelines.contracts.scoped_token import AttemptScope, TokenClaims

PREFIX = "sk-synth-"


class TokenInvalidError(Exception):
    """Unknown, malformed, forged or expired: the caller is not authenticated (401)."""


class TokenScopeError(Exception):
    """A valid token used outside its scope, e.g. for another model (403)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SigningKeyError(Exception):
    """The signing key is missing, unreadable or exposed: nothing can be minted with it."""


def read_signing_key(path: Path) -> bytes:
    """The platform's signing key, for minting: never created here, so minting a token
    takes the key the proxy checks, not merely access to the CLI."""
    configured = os.environ.get("SYNTH_PROXY_SIGNING_KEY")
    if configured:
        return configured.encode()
    try:
        mode = path.stat().st_mode & 0o777
        key = path.read_bytes()
    except FileNotFoundError:
        raise SigningKeyError(
            f"no proxy signing key at {path}; the capture proxy creates it when it first starts "
            "(`synth up`), or set SYNTH_PROXY_SIGNING_KEY to the deployment's key"
        ) from None
    except PermissionError:
        raise SigningKeyError(
            f"cannot read the proxy signing key {path}: permission denied; minting a token "
            "takes the key, so run this as the user the platform runs as, or set "
            "SYNTH_PROXY_SIGNING_KEY"
        ) from None
    if mode & 0o077:
        raise SigningKeyError(
            f"the proxy signing key {path} is open to other users (mode {mode:o}), and anyone "
            f"who reads it can mint tokens; run `chmod 600 {path}` and replace the key"
        )
    if not key:
        raise SigningKeyError(
            f"the proxy signing key {path} is empty; delete it and let the capture proxy "
            "create a new one (`synth up`)"
        )
    return key


def load_signing_key(path: Path) -> bytes:
    """The platform's signing key, created on first use with owner-only permissions."""
    if not os.environ.get("SYNTH_PROXY_SIGNING_KEY"):
        _create_secret(path)
    return read_signing_key(path)


def load_secret(path: Path) -> bytes:
    """A service's own 32-byte secret (the gateway's key HMAC secret), created on first
    use with owner-only permissions; refused when others may read it."""
    _create_secret(path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise SigningKeyError(
            f"the secret {path} is open to other users (mode {mode:o}); run "
            f"`chmod 600 {path}` and replace it"
        )
    return path.read_bytes()


def _create_secret(path: Path) -> None:
    # Written aside (mkstemp: mode 600), then linked into place: a process starting at
    # the same moment sees either no secret or the whole one, and the first link wins.
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=".secret-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(32))
        os.link(aside, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(aside)


def mint_token(key: bytes, scope: AttemptScope, *, ttl_sec: int) -> str:
    return sign_claims(key, new_claims(scope, ttl_sec=ttl_sec))


def new_claims(scope: AttemptScope, *, ttl_sec: int) -> TokenClaims:
    """The claims of a new token granting `scope` (only the scope's own fields, when it is a
    record that adds to it), valid for `ttl_sec` from now, with an id of its own (what
    revocation names)."""
    return TokenClaims(
        **scope.model_dump(include=set(AttemptScope.model_fields)),
        expires_at=int(time.time()) + ttl_sec,
        token_id=uuid.uuid4().hex,
    )


OPTIONAL_CLAIMS = frozenset({"sampling_limits"})
"""Claims added since tokens were first signed: left out of a token while unset, so that one
without them reads exactly as a token always read (an older proxy verifies it too)."""


def sign_claims(key: bytes, claims: TokenClaims) -> str:
    unset = {name for name in OPTIONAL_CLAIMS if getattr(claims, name) is None}
    body = _b64(claims.model_dump_json(exclude=unset).encode())
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
