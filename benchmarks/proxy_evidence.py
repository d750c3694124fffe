"""What our proxy published, read back the way the pipeline reads it.

Rows are counted in the control database, every chunk's bytes are fetched and checked
against its committed SHA-256, and its Parquet row count must match its committed count.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow.parquet as pq
from sqlalchemy import func, select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.control.database import engine_for
from synth_pipelines.control.schema import evidence_calls, evidence_chunks
from synth_pipelines.credentials import load_signing_key, mint_token
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store

RUN = "r-bench"


@dataclass(frozen=True)
class Published:
    rows: int
    """Calls committed in the control database."""
    verified_rows: int
    """Rows in the chunk objects whose bytes match their committed checksums."""
    chunks: int
    stored_bytes: int


class OurEvidence:
    def __init__(self, state_dir: Path, proxy_url: str, model: str):
        self.settings = Settings(data_dir=state_dir)
        self.proxy_url = proxy_url
        self.model = model
        self._engine = engine_for(self.settings.control_database_url)
        self._store = open_object_store(self.settings.objects_url)

    def token(self, attempt: str, role: str = "actor") -> str:
        return mint_token(
            load_signing_key(self.settings.signing_key_path),
            AttemptScope(
                run_id=RUN,
                attempt_id=attempt,
                owner=self.settings.owner,
                model=self.model,
                role=role,
            ),
            ttl_sec=3600,
        )

    def flush(self) -> None:
        response = httpx.post(
            f"{self.proxy_url}/internal/evidence/flush",
            json={},
            headers={"x-api-key": self.token("a-operator", role="operator")},
            timeout=300,
        )
        response.raise_for_status()

    def prompt_of_last_call(self, attempt: str) -> list[int]:
        self.flush()
        evidence = read_attempt_evidence(self._engine, self._store, [attempt])
        if evidence.problems or not evidence.calls[attempt]:
            raise RuntimeError(f"no readable evidence for {attempt}: {evidence.problems}")
        return evidence.calls[attempt][-1].prompt_tokens

    def sampling_ms(self, attempts: list[str]) -> dict[str, float]:
        """Each stored call's own sampling time, by message id."""
        self.flush()
        evidence = read_attempt_evidence(self._engine, self._store, attempts)
        if evidence.problems:
            raise RuntimeError(f"unreadable evidence: {evidence.problems}")
        return {
            f"msg_{call.call_id}": call.sample_ms
            for calls in evidence.calls.values()
            for call in calls
        }

    def published(self) -> Published:
        self.flush()
        with self._engine.connect() as conn:
            rows = conn.execute(select(func.count()).select_from(evidence_calls)).scalar_one()
            columns = evidence_chunks.c
            chunks = conn.execute(select(columns.chunk_key, columns.sha256, columns.calls)).all()
            stored = conn.execute(select(func.sum(evidence_chunks.c.size))).scalar_one() or 0
        verified = 0
        for key, sha256, calls in chunks:
            data = self._store.get(key, expected_sha256=sha256)
            if pq.read_metadata(io.BytesIO(data)).num_rows == calls:
                verified += calls
        return Published(rows=rows, verified_rows=verified, chunks=len(chunks), stored_bytes=stored)
