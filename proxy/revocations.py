"""Revoked tokens as the proxy's server process sees them: the control database's
`token_revocations`, followed by a background task, so that authentication costs a
dictionary lookup per call.

The copy may lag a revocation by up to `REFRESH_INTERVAL_SEC`; a call that slips
through in that window still records nothing, because the worker checks the database
itself right before it stages a call's evidence (`worker_calls.complete`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy import Engine

from synth_pipelines.control.token_revocations import revocations_after

REFRESH_INTERVAL_SEC = 0.5

log = logging.getLogger("synth.proxy.revocations")


def revoked_message(reason: str) -> str:
    return (
        f"invalid x-api-key: the token was revoked ({reason}); an attempt's token is "
        "good only while the attempt runs"
    )


class RevokedTokens:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._revoked: dict[str, tuple[str, int]] = {}
        self._sequence = 0

    def reason(self, token_id: str) -> str | None:
        """Why the token was revoked, or None if it was not (as of the last refresh)."""
        found = self._revoked.get(token_id)
        return found[0] if found is not None else None

    def refresh(self) -> None:
        """Read the revocations recorded since the last refresh (blocking: run it in a
        thread) and forget those whose tokens have expired, which are refused anyway."""
        for revocation in revocations_after(self.engine, self._sequence):
            self._revoked[revocation.token_id] = (revocation.reason, revocation.expires_at)
            self._sequence = revocation.sequence
        now = time.time()
        for token_id in [key for key, (_, expires) in self._revoked.items() if expires < now]:
            del self._revoked[token_id]

    async def follow(self) -> None:
        """Refresh until cancelled; a failed read is logged and retried (a background
        task that ended would leave this copy stale, with only the workers' checks)."""
        while True:
            try:
                await asyncio.to_thread(self.refresh)
            except Exception:
                log.exception("could not read token revocations; retrying")
            await asyncio.sleep(REFRESH_INTERVAL_SEC)
