"""Published evidence chunks told to Dagster, as materializations of `captured_interactions`.

The proxy publishes the chunks and knows nothing of Dagster: whoever starts it (the CLI)
gives it this reporter (`ProxyConfig.report_published`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from synth_pipelines.contracts.evidence_chunk import EvidenceChunk

if TYPE_CHECKING:
    from dagster import DagsterInstance

log = logging.getLogger("synth.proxy.capture")


class DagsterReporter:
    """Reports each published chunk as a runless materialization of
    `captured_interactions[batch]`, for lineage.

    It keeps one Dagster instance for the proxy's life: a new instance per chunk re-read
    the event storage's migration scripts and re-checked its schema every time (about
    150 ms of CPU a chunk, on the server process's GIL, so the event loop stalled with it).
    A batch partition, once seen, is not looked up again: partitions are never removed.
    Dagster is imported on the first report, so the proxy starts without it (about 0.8 s).
    """

    def __init__(self, dagster_home: Path) -> None:
        self._home = dagster_home
        self._instance: DagsterInstance | None = None
        self._batches: set[str] = set()

    def __call__(self, chunk: EvidenceChunk) -> None:
        if chunk.batch is None:
            return
        import dagster as dg

        instance = self._dagster()
        if chunk.batch not in self._batches:
            if not instance.has_dynamic_partition("batches", chunk.batch):
                log.warning(
                    "batch partition %s does not exist; not reporting %s",
                    chunk.batch,
                    chunk.chunk_key,
                )
                return
            self._batches.add(chunk.batch)
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                asset_key="captured_interactions",
                partition=chunk.batch,
                metadata={
                    "chunk": chunk.chunk_key,
                    "sha256": chunk.sha256,
                    "bytes": chunk.size,
                    "calls": chunk.calls,
                    "attempt": chunk.attempt_id,
                },
            )
        )

    def _dagster(self) -> DagsterInstance:
        if self._instance is None:
            from resources.dagster_instance import dagster_instance

            self._instance = dagster_instance(self._home)
        return self._instance

    def close(self) -> None:
        if self._instance is not None:
            self._instance.dispose()
            self._instance = None
