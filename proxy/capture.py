"""The proxy's evidence path: stage before responding, publish in the background.

Staging is on the response path (a worker stages each call before its response
completes, `proxy.worker_calls`); publishing never is: a bounded background thread uploads
chunks, commits their references and reports them (to whatever the proxy's config
names), so a slow upload never delays an agent.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from sqlalchemy import Engine

from synth_pipelines.contracts.evidence_chunk import EvidenceChunk
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.control.token_revocations import revocation_reason
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.spool import Spool

log = logging.getLogger("synth.proxy.capture")


class CaptureSink:
    def __init__(self, spool: Spool, publisher: EvidencePublisher, interval_sec: float = 1.0):
        self.spool = spool
        self.publisher = publisher
        self.interval_sec = interval_sec
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evidence-publisher", daemon=True)
        self.published_chunks = 0
        self.published_calls = 0
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def _publish_once(
        self, everything: bool = False, attempts: frozenset[str] | None = None
    ) -> list[EvidenceChunk]:
        chunks = self.publisher.publish_pending(everything, attempts)
        self.published_chunks += len(chunks)
        self.published_calls += sum(chunk.calls for chunk in chunks)
        return chunks

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.interval_sec)
            self._wake.clear()
            try:
                self._publish_once()
            except Exception:
                self.failures += 1
                log.exception("publishing evidence failed; staged calls stay in the spool")

    async def flush(self, attempts: frozenset[str] | None = None) -> list[EvidenceChunk]:
        """Publish what is staged now, everything or only these attempts' calls (the caller
        waits; agents never do)."""
        return await asyncio.to_thread(self._publish_once, True, attempts)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


def stage_text_call(
    spool: Spool, engine: Engine, interaction: Interaction, token_id: str
) -> str | None:
    """Stage a call of an inference-only route durably, unless its token was revoked
    meanwhile (the attempt ended); returns the revocation's reason.

    Such a call is text evidence: its request and response JSON, with no token ids or
    logprobs (the route returns none), and the route named in `sampler`, so learning can
    tell it apart and exclude it."""
    assert not interaction.prompt_tokens and not interaction.logprobs, "text evidence only"
    reason = revocation_reason(engine, token_id)
    if reason is None:
        spool.stage(interaction)
    return reason
