"""Publishes staged calls as Parquet chunks: create-only, checksummed, then committed.

Upload, commit and report are separate steps. A chunk is uploaded under a key its
intent fixes, its reference and its calls are committed in one transaction, it is
reported, and only then are the staged files removed. Repeating any step after a crash is
harmless: the upload is identical, the commit is recognised as done, and the report is
made again.

A chunk holds one attempt's calls. With `settle_sec`, an attempt is published once it has
staged nothing for that long (or holds a full chunk, or has waited `max_wait_sec`), so its
chunk holds many turns of one conversation, which share most of their prompt and compress
together; `publish_pending(everything=True)` publishes all that is staged.
"""

from __future__ import annotations

import io
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from synth_pipelines.contracts.evidence_chunk import EvidenceChunk
from synth_pipelines.control.schema import evidence_calls, evidence_chunks
from synth_pipelines.evidence.spool import PublishIntent, Spool, StagedCall
from synth_pipelines.storage.objectstore import ObjectStore


def chunk_parquet(table: pa.Table) -> bytes:
    """A chunk's bytes. Values are written plain, not dictionary-encoded: the calls of one
    attempt share most of their prompt and request, and zstd finds those repeats in plain
    values, so a chunk of five turns takes half the space it would with dictionaries."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", compression_level=3, use_dictionary=False)
    return sink.getvalue()


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
        report: Callable[[EvidenceChunk], None] | None = None,
        max_calls_per_chunk: int = 256,
        settle_sec: float = 0.0,
        max_wait_sec: float = 60.0,
    ):
        self.spool = spool
        self.store = store
        self.engine = engine
        self.report = report
        self.max_calls_per_chunk = max_calls_per_chunk
        self.settle = timedelta(seconds=settle_sec)
        self.max_wait = timedelta(seconds=max_wait_sec)
        self._lock = threading.Lock()

    def publish_pending(
        self, everything: bool = False, attempts: frozenset[str] | None = None
    ) -> list[EvidenceChunk]:
        """Complete interrupted chunks, then publish the staged calls of settled attempts
        (of every attempt with `everything`); with `attempts`, only those attempts' calls,
        settled or not."""
        with self._lock:
            published = [self._complete(intent) for intent in self.spool.intents()]
            groups: dict[tuple[str, str | None, str], list[StagedCall]] = defaultdict(list)
            for call in self.spool.staged():
                if attempts is None or call.attempt_id in attempts:
                    groups[(call.run_id, call.batch, call.attempt_id)].append(call)
            everything = everything or attempts is not None
            now = datetime.now(UTC)
            for (run_id, batch, attempt_id), calls in sorted(
                groups.items(), key=lambda item: str(item[0])
            ):
                calls.sort(key=lambda c: (c.created_at, c.call_id))
                if not (everything or self._settled(calls, now)):
                    continue
                for start in range(0, len(calls), self.max_calls_per_chunk):
                    chunk = calls[start : start + self.max_calls_per_chunk]
                    intent = self.spool.write_intent(
                        run_id, batch, attempt_id, [c.call_id for c in chunk]
                    )
                    published.append(self._complete(intent))
            return published

    def _settled(self, calls: list[StagedCall], now: datetime) -> bool:
        return (
            now - calls[-1].created_at >= self.settle
            or now - calls[0].created_at >= self.max_wait
            or len(calls) >= self.max_calls_per_chunk
        )

    def _committed(self, key: str) -> EvidenceChunk | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(evidence_chunks).where(evidence_chunks.c.chunk_key == key)
            ).first()
        return EvidenceChunk.model_validate(row, from_attributes=True) if row else None

    def _complete(self, intent: PublishIntent) -> EvidenceChunk:
        key = chunk_key(intent)
        committed = self._committed(key)
        if committed is not None:
            stored = self.store.head(key)
            assert stored is not None, f"committed evidence chunk {key} is missing"
            return self._reported(intent, committed)
        table = self.spool.load_table(intent.call_ids)
        ref = self.store.put(key, chunk_parquet(table))
        calls = table.select(
            ["call_id", "run_id", "batch", "attempt_id", "agent_id", "call_index", "role"]
        ).to_pylist()
        chunk = EvidenceChunk(
            chunk_key=key,
            run_id=intent.run_id,
            batch=intent.batch,
            attempt_id=intent.attempt_id,
            sha256=ref.sha256,
            size=ref.size,
            calls=len(calls),
            published_at=datetime.now(UTC),
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(evidence_chunks).values(**chunk.model_dump()))
                conn.execute(insert(evidence_calls), [{**call, "chunk_key": key} for call in calls])
        except IntegrityError:
            if self._committed(key) is None:
                raise
        return self._reported(intent, chunk)

    def _reported(self, intent: PublishIntent, chunk: EvidenceChunk) -> EvidenceChunk:
        """Report before the intent is finished: a crash in between reports it again on
        restart (at least once), where finishing first would lose the report for good."""
        if self.report is not None:
            self.report(chunk)
        self.spool.finish(intent)
        return chunk
