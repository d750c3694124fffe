"""Claims as tokens: the claims, then an HMAC of them under the gateway's key secret.

The claims travel with the token, so whoever honours it needs no record of what was
granted; the signature makes any changed claim a refused token. The secret is the one
operators' keys are hashed under; each kind of token signs under a label of its own, so
that a token of one kind is never taken for another.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime

from pydantic import BaseModel, ValidationError

from synth_pipelines.contracts.object_claims import ObjectClaims


class SignatureRefusedError(Exception):
    """A token the gateway did not sign as it stands; the message says what is wrong."""


def _encoded(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _decoded(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(secret: bytes, label: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, label + payload, hashlib.sha256).digest()


def sign(secret: bytes, label: bytes, claims: BaseModel) -> str:
    payload = claims.model_dump_json().encode()
    return f"{_encoded(payload)}.{_encoded(_signature(secret, label, payload))}"


def verified[Claims: BaseModel](
    secret: bytes, label: bytes, token: str, claims_type: type[Claims]
) -> Claims:
    """The claims of a token signed under `label`; `SignatureRefusedError` otherwise."""
    payload_text, _, signature_text = token.partition(".")
    try:
        payload, signature = _decoded(payload_text), _decoded(signature_text)
    except ValueError:
        raise SignatureRefusedError("it is not a grant the gateway issued") from None
    if not hmac.compare_digest(signature, _signature(secret, label, payload)):
        raise SignatureRefusedError("its signature does not match its claims")
    try:
        return claims_type.model_validate_json(payload)
    except ValidationError:
        raise SignatureRefusedError("its claims do not parse") from None


def standing[Claims: ObjectClaims](
    secret: bytes, label: bytes, token: str, claims_type: type[Claims], now: datetime | None
) -> Claims:
    """`verified`, and not expired at `now` (default: this moment)."""
    claims = verified(secret, label, token, claims_type)
    if claims.expires_at <= (now or datetime.now(UTC)):
        raise SignatureRefusedError(f"it expired at {claims.expires_at.isoformat()}")
    return claims
