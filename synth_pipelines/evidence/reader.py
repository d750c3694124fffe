"""Reading published evidence back: every chunk's bytes verified before a row is used."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine, func, select

from synth_pipelines.contracts.evidence_chunk import EvidenceChunk
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.table import SchemaMismatchError, parquet_to_table
from synth_pipelines.control.schema import evidence_calls, evidence_chunks
from synth_pipelines.storage.objectstore import (
    ObjectIntegrityError,
    ObjectMissingError,
    ObjectStore,
)


@dataclass
class AttemptEvidence:
    """The committed calls of each attempt, and why an attempt's evidence is unusable."""

    calls: dict[str, list[Interaction]] = field(default_factory=lambda: defaultdict(list))
    problems: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    bytes: int = 0


def read_attempt_evidence(
    engine: Engine, store: ObjectStore, attempt_ids: list[str]
) -> AttemptEvidence:
    evidence = AttemptEvidence()
    if not attempt_ids:
        return evidence
    with engine.connect() as conn:
        rows = conn.execute(
            select(evidence_chunks).where(evidence_chunks.c.attempt_id.in_(attempt_ids))
        ).all()
    for chunk in (EvidenceChunk.model_validate(row, from_attributes=True) for row in rows):
        try:
            data = store.get(chunk.chunk_key, expected_sha256=chunk.sha256)
            calls = Interaction.from_table(parquet_to_table(data))
        except (ObjectIntegrityError, ObjectMissingError, SchemaMismatchError) as error:
            evidence.problems[chunk.attempt_id] = f"evidence chunk {chunk.chunk_key}: {error}"
            continue
        evidence.chunks += 1
        evidence.bytes += chunk.size
        evidence.calls[chunk.attempt_id].extend(calls)
    for calls in evidence.calls.values():
        calls.sort(key=lambda c: (c.created_at, c.call_id))
    return evidence


def run_attempts(engine: Engine, run_id: str) -> list[str]:
    """The attempts of a run that published evidence, in order."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(evidence_chunks.c.attempt_id)
            .where(evidence_chunks.c.run_id == run_id)
            .distinct()
            .order_by(evidence_chunks.c.attempt_id)
        ).all()
    return [row.attempt_id for row in rows]


def published_calls(engine: Engine, attempt_id: str, role: str, since: datetime) -> int:
    """How many calls of the attempt in `role` were published from `since` on: a run of its
    harness that reached its model has at least one once its evidence is flushed."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(evidence_calls)
                .join(evidence_chunks, evidence_chunks.c.chunk_key == evidence_calls.c.chunk_key)
                .where(
                    evidence_calls.c.attempt_id == attempt_id,
                    evidence_calls.c.role == role,
                    evidence_chunks.c.published_at >= since,
                )
            ).scalar_one()
        )
