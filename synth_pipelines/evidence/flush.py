"""Asking the capture proxy to publish what it has staged, before evidence is read."""

from __future__ import annotations

from pathlib import Path

import httpx

from synth_pipelines.tls import client_context


class EvidenceFlushError(RuntimeError):
    pass


def flush_evidence(
    proxy_url: str,
    signing_key_path: Path,
    owner: str,
    run_id: str,
    attempt_ids: list[str] | None = None,
) -> dict[str, int]:
    """Ask the proxy at `proxy_url` to publish every staged call of the run now (only
    these attempts' calls, when given), as `owner`'s operator; returns the proxy's counts."""
    from synth_pipelines.contracts.scoped_token import AttemptScope
    from synth_pipelines.credentials import load_signing_key, mint_token

    token = mint_token(
        load_signing_key(signing_key_path),
        AttemptScope(run_id=run_id, attempt_id="*", owner=owner, model="*", role="operator"),
        ttl_sec=300,
    )
    try:
        response = httpx.post(
            f"{proxy_url}/internal/evidence/flush",
            json={"attempt_ids": attempt_ids or []},
            headers={"x-api-key": token},
            timeout=120,
            verify=client_context(),
        )
        response.raise_for_status()
    except httpx.HTTPError as error:
        raise EvidenceFlushError(
            f"could not publish the capture proxy's staged evidence at {proxy_url}: {error}"
        ) from None
    counts: dict[str, int] = response.json()
    return counts
