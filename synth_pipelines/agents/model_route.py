"""Did the harness reach its model? Asked once its process has ended.

An attempt whose harness never reached its model, or stopped because its model route
failed (the proxy refused the token, the model was not served, the backend failed), is a
platform error: it says nothing about the policy, whatever the verifier writes afterwards.
The attempt's evidence is published at once (so learning need not wait for it either),
then the published calls and the faults the proxy recorded are read back.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from synth_pipelines.agents.platform_access import PlatformAccess
from synth_pipelines.control.faults import attempt_fault
from synth_pipelines.evidence.flush import EvidenceFlushError, flush_evidence
from synth_pipelines.evidence.reader import published_calls


class ModelRouteError(RuntimeError):
    """The platform failed the harness's model route: a platform error, not an outcome."""


def _check(
    platform: PlatformAccess,
    run_id: str,
    attempt_id: str,
    role: str,
    started: datetime,
    exit_code: int,
) -> None:
    try:
        flush_evidence(
            platform.proxy_url, platform.signing_key_path, platform.owner, run_id, [attempt_id]
        )
    except EvidenceFlushError as error:
        raise ModelRouteError(f"the attempt's model calls were not published: {error}") from None
    engine = platform.control_engine()
    fault = attempt_fault(engine, run_id, attempt_id, role)
    recent = fault if fault is not None and fault.last_at >= started else None
    if published_calls(engine, attempt_id, role, started) == 0:
        why = recent.describe() if recent else "no call of it reached the capture proxy"
        raise ModelRouteError(f"the {role} never reached its model: {why}")
    if recent is not None and exit_code != 0:
        raise ModelRouteError(f"the harness exited with {exit_code} after {recent.describe()}")


async def check_model_route(
    platform: PlatformAccess,
    run_id: str,
    attempt_id: str,
    role: str,
    started: datetime,
    exit_code: int,
) -> None:
    """Raise `ModelRouteError` if the harness that ran from `started` and ended with
    `exit_code` never reached its model, or ended after its model route failed."""
    await asyncio.to_thread(_check, platform, run_id, attempt_id, role, started, exit_code)
