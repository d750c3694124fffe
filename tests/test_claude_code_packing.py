"""How a real Claude Code attempt packs into learning datums.

The pinned Claude Code CLI, through the capture proxy, with the model service scripted in
Qwen3's format, makes two calls: a Bash tool call, then, with the tool's result in its
request, a final answer. Packed for learning (`learning/datums.py`), every sampled token
carries the attempt's advantage and the sampler's own logprob; every other token (the
harness's system prompt and tool definitions, the instruction, the tool result, whatever
Claude Code added between the calls) weighs zero; and no datum holds a token that was not
in a captured prompt or a sampled completion. The hand check below rebuilds the expected
datums from the captured calls alone, by the packing rule: a call continues the datum when
its prompt starts with everything the datum holds, else it starts a new one.
"""

from __future__ import annotations

import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.datums import attempt_datums
from synth_pipelines.storage.objectstore import open_object_store
from tests.hand_packing import assert_packed_as, hand_datums
from tests.live_services import (
    CLAUDE_FILE_SCRIPT,
    capture_proxy,
    model_service,
    run_claude_code,
    set_script,
)

ADVANTAGE = 0.75
RUN, ATTEMPT, TRIAL = "r-pack", "r-pack.b0000.g0000.a000", "r-pack.b0000.g0000.a000.t0"


@pytest.mark.slow
@pytest.mark.parametrize("bare", [False, True], ids=["default-request", "bare"])
def test_a_two_call_claude_code_attempt_trains_only_on_its_sampled_tokens(state, tmp_path, bare):
    with model_service() as model_url, capture_proxy(model_url) as proxy:
        set_script(model_url, CLAUDE_FILE_SCRIPT)
        token = proxy.token(run=RUN, attempt=ATTEMPT, batch=f"{RUN}.b0000", trial=TRIAL)
        result = run_claude_code(proxy.url, token, tmp_path, bare=bare)
        assert result.returncode == 0, result.stderr
        proxy.flush()
    evidence = read_attempt_evidence(
        control_engine(Settings()), open_object_store(Settings().objects_url), [ATTEMPT]
    )
    calls = sorted(evidence.calls[ATTEMPT], key=lambda call: call.call_index)
    assert [call.stop_reason for call in calls] == ["tool_use", "end_turn"]
    standing = QualifiedAttempt(
        run_id=RUN,
        batch=f"{RUN}.b0000",
        attempt_id=ATTEMPT,
        trial_id=TRIAL,
        group_index=0,
        task_name="synth/made-by-claude",
        reward=1.0,
        calls=len(calls),
        qualified=True,
        exclusion=None,
        group_qualified=True,
        group_exclusion=None,
        advantage=ADVANTAGE,
        exclusion_reason=None,
        group_exclusion_reason=None,
    )
    rows = attempt_datums(standing, calls)
    expected = hand_datums(calls, ADVANTAGE)

    # Claude Code's second request renders as the first prompt, the sampled tool call and
    # the tool's result: one datum, the tool result inside it as zero-weight context.
    assert len(expected) == 1
    assert len(rows) == len(expected)
    for row, hand in zip(rows, expected, strict=True):
        assert_packed_as(row, hand)
    sampled = sum(len(call.completion_tokens) for call in calls)
    assert sum(1 for value in rows[0].advantages if value) == sampled
    # Every token of the datum is a captured prompt's or a sampled completion's.
    final = calls[-1]
    assert rows[0].model_input + rows[0].target_tokens[-1:] == (
        final.prompt_tokens + final.completion_tokens
    )
