"""Upload grants as tokens (`gateway.signed_claims`): neither an upload nor a commit
needs the gateway to remember what it granted, and any changed claim (another key,
digest, size, owner or expiry) is a refused grant."""

from __future__ import annotations

from datetime import datetime

from gateway.signed_claims import SignatureRefusedError, sign, standing
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.upload_grant import GrantClaims

_LABEL = b"synth upload grant v1\0"


def sign_grant(secret: bytes, claims: GrantClaims) -> str:
    return sign(secret, _LABEL, claims)


def verify_grant(secret: bytes, grant: str, now: datetime | None = None) -> GrantClaims:
    """The claims of a grant the gateway signed and that has not expired; anything else
    is refused (403), naming why."""
    try:
        return standing(secret, _LABEL, grant, GrantClaims, now)
    except SignatureRefusedError as refused:
        raise _refused(str(refused)) from None


def _refused(reason: str) -> ApiError:
    return ApiError(
        "permission_error",
        f"upload grant refused: {reason}; ask for new grants (`synth dataset publish` "
        "does, each time it runs)",
    )
