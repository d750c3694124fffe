"""A run's export, built by a process of its own (`runtime/run_exports.py`) while the
gateway waits on it without blocking: the table and its file never sit in the gateway's
memory. A few exports run at once; more wait their turn."""

from __future__ import annotations

import asyncio
import logging
import sys

from gateway.config import GatewayConfig
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.run_export import ExportedTable, ExportRequest
from synth_pipelines.runtime.run_exports import MODULE, ExportJob, ExportOutcome
from synth_pipelines.storage.objectstore import ObjectRef

log = logging.getLogger(__name__)

CONCURRENT_EXPORTS = 2
"""Exports built at once by one gateway: each is a process that may read a whole run."""


class ExportSlots:
    """The processes one gateway lets export at once."""

    def __init__(self, config: GatewayConfig, slots: int = CONCURRENT_EXPORTS) -> None:
        self._config = config
        self._slots = asyncio.Semaphore(slots)

    async def export(self, run_id: str, request: ExportRequest) -> tuple[ExportedTable, ObjectRef]:
        """The stored export; `ApiError` when the run's evidence fails its integrity check
        (nothing stored) or the exporting process fails."""
        job = ExportJob(
            database_url=self._config.database_url,
            objects_url=self._config.objects_url,
            s3_endpoint_url=self._config.s3_endpoint_url,
            run_id=run_id,
            what=request.what,
            format=request.format,
        )
        async with self._slots:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                MODULE,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await process.communicate(job.model_dump_json().encode())
        if process.returncode != 0:
            log.error("the export of %s failed (exit %s): %s", run_id, process.returncode, err)
            raise ApiError("api_error", f"the export of {run_id} failed; see the gateway log")
        outcome = ExportOutcome.model_validate_json(out)
        if outcome.unreadable is not None:
            raise ApiError("api_error", outcome.unreadable)
        assert outcome.exported is not None and outcome.stored is not None
        return outcome.exported, outcome.stored
