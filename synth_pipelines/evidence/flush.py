"""Asking the capture proxy to publish what it has staged, before evidence is read."""

from __future__ import annotations

import httpx

from synth_pipelines.config import settings
from synth_pipelines.tls import client_context


class EvidenceFlushError(RuntimeError):
    pass


def flush_evidence(run_id: str, attempt_ids: list[str] | None = None) -> dict[str, int]:
    """Publish every staged call now (only these attempts' calls, when given); returns the
    proxy's counts."""
    from synth_pipelines.credentials import load_signing_key, mint_token

    config = settings()
    token = mint_token(
        load_signing_key(config.signing_key_path),
        run_id=run_id,
        attempt_id="*",
        owner=config.owner,
        model="*",
        ttl_sec=300,
        role="operator",
    )
    try:
        response = httpx.post(
            f"{config.proxy_url}/internal/evidence/flush",
            json={"attempt_ids": attempt_ids or []},
            headers={"x-api-key": token},
            timeout=120,
            verify=client_context(),
        )
        response.raise_for_status()
    except httpx.HTTPError as error:
        raise EvidenceFlushError(
            f"could not publish the capture proxy's staged evidence at {config.proxy_url}: {error}"
        ) from None
    counts: dict[str, int] = response.json()
    return counts
