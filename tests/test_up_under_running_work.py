"""`synth up` with another configuration restarts no service while a run is active: the
runs sample and train through those services, and a restart would end their work. Once
no run is active, the same command restarts what changed.

`synth up` is run for real (every embedded service), and the run is an accepted one held
in line by its organization's limit of 0 running runs, so it stays active throughout.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from synth_pipelines.control.database import engine_for
from synth_pipelines.control.run_lifecycle import cancel_run
from tests.embedded_environment import ADDRESSES, embedded_environment, synth
from tests.gateway_support import Gateway

OTHER_MODEL = {"SYNTH_BASE_MODEL": "synth/qwen3-learner"}


def _pids(done: subprocess.CompletedProcess) -> dict[str, int]:
    assert done.returncode == 0, done.stdout + done.stderr
    return {row["service"]: row["pid"] for row in json.loads(done.stdout)}


@pytest.mark.slow
def test_another_configuration_waits_until_no_run_is_active(tmp_path: Path):
    env = embedded_environment(tmp_path, ADDRESSES)
    first = _pids(synth(env, "up", "--json"))
    try:
        held = synth(env, "admin", "org", "limits", "lab", "--max-runs", "0", "--json")
        assert held.returncode == 0, held.stderr
        engine = engine_for(f"sqlite:///{tmp_path / 'state' / 'control.db'}")
        run = Gateway("", engine, b"").run("alice", org="lab")

        refused = synth({**env, **OTHER_MODEL}, "up", "--json")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, refused.stderr
        assert "model-service would restart" in lines[0] and run.run_id in lines[0]
        assert "nothing was restarted" in lines[0]
        assert json.loads(refused.stdout)["exit_code"] == 2
        # Every service is the one started first: the same command line finds each.
        assert _pids(synth(env, "up", "--json")) == first

        assert cancel_run(engine, run.run_id, "the operator's choice")
        restarted = _pids(synth({**env, **OTHER_MODEL}, "up", "--json"))
        assert restarted["model-service"] != first["model-service"]
        assert {name: pid for name, pid in restarted.items() if name != "model-service"} == {
            name: pid for name, pid in first.items() if name != "model-service"
        }
    finally:
        stopped = synth(env, "down", "--json")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
