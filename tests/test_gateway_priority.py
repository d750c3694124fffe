"""The gateway is scheduled below the work it admits, as `synth up` starts it: on a host
the runs keep busy, operators' reads wait their turn instead of slowing the attempts."""

from __future__ import annotations

import psutil

from synth_pipelines.services.embedded import GATEWAY_NICENESS
from tests.gateway_process import gateway_process


def test_the_gateway_runs_at_a_lower_priority_than_its_starter(state, monkeypatch):
    with gateway_process(monkeypatch) as process:
        assert process.nice() == psutil.Process().nice() + GATEWAY_NICENESS
