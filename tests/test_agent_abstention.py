"""An agent cannot choose not to be graded: what it caused is an assessed 0.

A failing agent that could turn its attempt into a task or platform error would leave
pass@1 and its GRPO group instead of taking its 0. Each attack below once did:

- a read-only, non-empty directory in `/logs/verifier` made the shared verifier's reset
  fail (`SandboxPathError`, a task error);
- an OOM kill in its own cgroup plus SIGKILL of its top process raised
  `MemoryLimitExceededError` (a task error);
- a call for another model was recorded as a platform fault, so a non-zero exit after it
  became `ModelRouteError` (a platform error).

The agent here is Harbor's oracle running an attacking `solve.sh` in the bwrap sandbox
on the host root (no image build); the classification is the platform's own
(`runtime/harbor_trials.py`, `contracts/outcome_classes.py`).
"""

from __future__ import annotations

import httpx
import pytest
from sandbox_support import isolated_state, make_task, requires_cgroups, run_trial

from synth_pipelines.config import Settings
from synth_pipelines.contracts.outcome_classes import classify
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.faults import attempt_fault
from synth_pipelines.runtime.harbor_trials import agent_started
from tests.live_services import capture_proxy, model_service, set_script

HONEST_TEST_SH = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
LOCKING_SOLVE_SH = """\
#!/bin/bash
mkdir -p /logs/verifier/locked
echo '{"reward": 1}' > /logs/verifier/locked/reward.json
chmod 0555 /logs/verifier/locked
chmod 0555 /logs/verifier
"""
OOM_SOLVE_SH = """\
#!/bin/bash
python3 -c 'block = bytearray(1 << 30); print(len(block))'
kill -9 $$
"""


@pytest.fixture
def sandbox_state(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def ending_of(result):
    error = result.exception_info
    return classify(
        error.exception_type if error else None,
        error.exception_message if error else None,
        verified=True,
        reward_found=bool(result.verifier_result and result.verifier_result.rewards),
        agent_started=agent_started(result),
    )


def test_files_the_agent_made_unremovable_do_not_stop_the_shared_verifiers_reset(
    sandbox_state, tmp_path
):
    task = make_task(
        tmp_path,
        "unremovable-verifier-files",
        solve_sh=LOCKING_SOLVE_SH,
        test_sh=HONEST_TEST_SH,
        verifier_mode="shared",
    )
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 0.0}
    assert ending_of(result).error_class is None


@requires_cgroups
def test_an_agent_that_exhausts_its_memory_is_assessed_zero_with_the_reason(
    sandbox_state, tmp_path
):
    task = make_task(
        tmp_path,
        "agent-out-of-memory",
        solve_sh=OOM_SOLVE_SH,
        test_sh=HONEST_TEST_SH,
        extra_toml="\n[environment]\nmemory_mb = 128\n",
    )
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is not None
    assert result.exception_info.exception_type == "MemoryLimitExceededError"
    ending = ending_of(result)
    assert ending.error_class is None and ending.agent_caused
    assert ending.reason.startswith("assessed 0, the agent's doing: MemoryLimitExceededError")
    assert "memory limit of 128 MB" in ending.reason


def test_a_task_error_before_the_agent_ran_stays_a_task_error() -> None:
    ending = classify(
        "MemoryLimitExceededError", "setup", verified=False, reward_found=False, agent_started=False
    )
    assert ending.error_class == "task" and not ending.agent_caused
    platform = classify(
        "ModelRouteError", "proxy down", verified=True, reward_found=False, agent_started=True
    )
    assert platform.error_class == "platform" and not platform.agent_caused


@pytest.mark.slow
def test_a_call_for_another_model_is_refused_without_a_platform_fault(state):
    engine = control_engine(Settings())
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, [{"completion": "ok", "repeat": True}])
        other = httpx.post(
            f"{proxy.url}/v1/messages",
            json={**body, "model": "deepseek-ai/DeepSeek-V3.1"},
            headers={"x-api-key": proxy.token(run="r-other", attempt="a-other")},
        )
        # The same attempt's call for its own model that the platform cannot serve is
        # still the platform's fault: what tells the two apart is who chose the model.
        unserved = httpx.post(
            f"{proxy.url}/v1/messages",
            json={**body, "model": "nobody/serves-this"},
            headers={
                "x-api-key": proxy.token(
                    run="r-unserved", attempt="a-unserved", model="nobody/serves-this"
                )
            },
        )
    assert other.status_code == 403, other.text
    assert other.json()["error"]["type"] == "permission_error"
    assert attempt_fault(engine, "r-other", "a-other", "actor") is None
    assert unserved.status_code >= 400
    assert attempt_fault(engine, "r-unserved", "a-unserved", "actor") is not None
