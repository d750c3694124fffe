"""Publishes staged calls as Parquet chunks: create-only, checksummed, then committed.

Upload, commit and report are separate steps. A chunk is uploaded under a key its
intent fixes, its reference and its calls are committed in one transaction, and only
then are the staged files removed. Repeating any step after a crash is harmless: the
upload is identical and the commit is recognised as done.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.table import table_to_parquet
from synth_pipelines.control.schema import evidence_calls, evidence_chunks
from synth_pipelines.evidence.spool import PublishIntent, Spool
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class PublishedChunk:
    key: str
    sha256: str
    size: int
    run_id: str
    batch: str | None
    attempt_id: str
    calls: int


def chunk_key(intent: PublishIntent) -> str:
    return (
        f"evidence/{intent.run_id}/{intent.batch or 'unbatched'}/{intent.attempt_id}/"
        f"{intent.chunk_id}.parquet"
    )


class EvidencePublisher:
    def __init__(
        self,
        spool: Spool,
        store: ObjectStore,
        engine: Engine,
        report: Callable[[PublishedChunk], None] | None = None,
        max_calls_per_chunk: int = 256,
    ):
        self.spool = spool
        self.store = store
        self.engine = engine
        self.report = report
        self.max_calls_per_chunk = max_calls_per_chunk
        self._lock = threading.Lock()

    def publish_pending(self) -> list[PublishedChunk]:
        """Complete interrupted chunks, then publish every staged call not yet claimed."""
        with self._lock:
            published = [self._complete(intent) for intent in self.spool.intents()]
            groups: dict[tuple[str, str | None, str], list[Interaction]] = defaultdict(list)
            for call_id in self.spool.staged_call_ids():
                call = self.spool.load(call_id)
                groups[(call.run_id, call.batch, call.attempt_id)].append(call)
            for (run_id, batch, attempt_id), calls in sorted(
                groups.items(), key=lambda item: str(item[0])
            ):
                calls.sort(key=lambda c: (c.created_at, c.call_id))
                for start in range(0, len(calls), self.max_calls_per_chunk):
                    chunk = calls[start : start + self.max_calls_per_chunk]
                    intent = self.spool.write_intent(
                        run_id, batch, attempt_id, [c.call_id for c in chunk]
                    )
                    published.append(self._complete(intent))
            return published

    def _committed(self, key: str) -> bool:
        with self.engine.connect() as conn:
            return (
                conn.execute(
                    select(evidence_chunks.c.chunk_key).where(evidence_chunks.c.chunk_key == key)
                ).first()
                is not None
            )

    def _complete(self, intent: PublishIntent) -> PublishedChunk:
        key = chunk_key(intent)
        if self._committed(key):
            self.spool.finish(intent)
            ref = self.store.head(key)
            assert ref is not None, f"committed evidence chunk {key} is missing"
            return PublishedChunk(
                key,
                ref.sha256,
                ref.size,
                intent.run_id,
                intent.batch,
                intent.attempt_id,
                len(intent.call_ids),
            )
        calls = [self.spool.load(call_id) for call_id in intent.call_ids]
        ref = self.store.put(key, table_to_parquet(Interaction.to_table(calls)))
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(evidence_chunks).values(
                        chunk_key=key,
                        run_id=intent.run_id,
                        batch=intent.batch,
                        attempt_id=intent.attempt_id,
                        sha256=ref.sha256,
                        size=ref.size,
                        calls=len(calls),
                        published_at=datetime.now(UTC),
                    )
                )
                conn.execute(
                    insert(evidence_calls),
                    [
                        {
                            "call_id": call.call_id,
                            "chunk_key": key,
                            "run_id": call.run_id,
                            "batch": call.batch,
                            "attempt_id": call.attempt_id,
                            "agent_id": call.agent_id,
                            "call_index": call.call_index,
                            "role": call.role,
                        }
                        for call in calls
                    ],
                )
        except IntegrityError:
            if not self._committed(key):
                raise
        self.spool.finish(intent)
        chunk = PublishedChunk(
            key, ref.sha256, ref.size, intent.run_id, intent.batch, intent.attempt_id, len(calls)
        )
        if self.report is not None:
            self.report(chunk)
        return chunk
