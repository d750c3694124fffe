"""A real Claude Code attempt whose tool output outgrows the model's context, packed for learning.

The pinned Claude Code CLI (bare, Bash only, its own compaction off) runs through the capture
proxy, which serves the model with a 10,000-token context window and a 2,000-token output
limit, so its prompt budget is 8,000 tokens. The scripted model has Claude Code run two Bash
commands that each print 500 rows (29,499 characters, about 8,500 tokens), then answer.

Pinned, from what the proxy captured:
- the second call's prompt is over budget, so the proxy cuts the listing to 16,000 characters
  around its omission marker; the third call's is over budget even with both listings cut so,
  and the older listing is cut to 4,000 characters (oldest block first, hardest);
- each captured prompt is exactly the fitted request rendered, within the budget: the model
  sampled the marker, never the omitted rows;
- packed (`learning/datums.py`), the datum tokens are those sampled prompts and completions;
  the fitted tool result weighs zero, the sampled tokens carry the attempt's advantage and
  the sampler's logprobs. The second call's fitted prompt still extends the first call's
  prompt and completion, so it continues the datum; the third call's does not (its older
  listing lost rows the datum holds), so a second datum starts there.
"""

from __future__ import annotations

import json
import re

import pytest
from tml_renderers import renderers

from proxy.context_fit import omission_marker
from synth_pipelines.config import Settings
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.contracts.messages import MessagesRequest
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.learning.datums import attempt_datums
from synth_pipelines.rendering.adapters.qwen import QwenAdapter
from synth_pipelines.rendering.model_registry import ModelEntry, ModelRegistry, TinkerRoute
from synth_pipelines.storage.objectstore import open_object_store
from tests.hand_packing import assert_packed_as, hand_datums
from tests.live_services import MODEL, capture_proxy, model_service, run_claude_code, set_script

SMALL_CONTEXT = ModelEntry(
    id=MODEL,
    family="qwen",
    context_window=10_000,
    max_output_tokens=2_000,
    backend=TinkerRoute(base_model=MODEL),
    trainable=True,
)
ADVANTAGE = 0.5
RUN, BATCH = "r-fit", "r-fit.b0000"
ATTEMPT = f"{BATCH}.g0000.a000"
TRIAL = f"{ATTEMPT}.t0"
ROWS = 500
LINE = "{tag} row {number:03d}: the quick brown fox jumps over the lazy dog"


def _listing(tag: str) -> str:
    """What the Bash command for `tag` prints (Claude Code drops the final newline)."""
    return "\n".join(LINE.format(tag=tag, number=number) for number in range(1, ROWS + 1))


def _bash_call(tag: str) -> str:
    command = (
        f"for i in $(seq -w 1 {ROWS}); do "
        f'echo "{tag} row $i: the quick brown fox jumps over the lazy dog"; done'
    )
    arguments = {"command": command, "description": f"print the {tag} rows"}
    return f"<tool_call>\n{json.dumps({'name': 'Bash', 'arguments': arguments})}\n</tool_call>"


SCRIPT = [
    {"match": "omega row 001", "completion": "Both listings printed.", "repeat": True},
    {"match": "alpha row 001", "completion": _bash_call("omega"), "repeat": True},
    {"completion": _bash_call("alpha"), "repeat": True},
]
"""Each listing's first row appears in a prompt only once its command has run."""


def _tool_results(request_json: str) -> list[str]:
    texts = []
    for message in json.loads(request_json)["messages"]:
        if not isinstance(message["content"], list):
            continue
        for block in message["content"]:
            if block.get("type") != "tool_result":
                continue
            content = block["content"]
            texts.append(content if isinstance(content, str) else content[0]["text"])
    return texts


def _kept(original: str, fitted: str) -> int:
    """The characters of `original` that `fitted` keeps around its one omission marker."""
    (omitted,) = re.findall(r"\[\.\.\. (\d+) characters omitted by the proxy", fitted)
    marker = omission_marker(int(omitted))
    head, tail = fitted.split(marker)
    assert original.startswith(head) and original.endswith(tail)
    assert len(head) + len(tail) + int(omitted) == len(original)
    return len(head) + len(tail)


def _extends(call: Interaction, earlier: Interaction) -> bool:
    held = earlier.prompt_tokens + earlier.completion_tokens
    return call.prompt_tokens[: len(held)] == held


@pytest.mark.slow
def test_an_oversized_tool_result_is_trained_on_as_the_fitted_prompt_the_model_sampled(
    state, tmp_path
):
    with (
        model_service() as model_url,
        capture_proxy(model_url, registry=ModelRegistry([SMALL_CONTEXT])) as proxy,
    ):
        set_script(model_url, SCRIPT)
        token = proxy.token(run=RUN, attempt=ATTEMPT, batch=BATCH, trial=TRIAL)
        result = run_claude_code(
            proxy.url, token, tmp_path, bare=True, extra_env={"DISABLE_AUTO_COMPACT": "1"}
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["result"] == "Both listings printed."
        proxy.flush()
    evidence = read_attempt_evidence(
        control_engine(Settings()), open_object_store(Settings().objects_url), [ATTEMPT]
    )
    assert evidence.problems == {}
    calls = sorted(evidence.calls[ATTEMPT], key=lambda call: call.call_index)
    assert [(call.agent_id, call.stop_reason) for call in calls] == [
        ("main", "tool_use"),
        ("main", "tool_use"),
        ("main", "end_turn"),
    ]
    assert [call.fitted for call in calls] == [False, True, True]
    first, second, third = calls

    # Claude Code sent each listing whole; the proxy cut them to fit, the older one harder.
    alpha, omega = _listing("alpha"), _listing("omega")
    assert len(alpha) == 29_499
    assert _tool_results(second.request_json) == [alpha]
    assert _tool_results(third.request_json) == [alpha, omega]
    assert second.effective_request_json is not None and third.effective_request_json is not None
    (alpha_cut,) = _tool_results(second.effective_request_json)
    assert _kept(alpha, alpha_cut) == 16_000
    alpha_cut_harder, omega_cut = _tool_results(third.effective_request_json)
    assert (_kept(alpha, alpha_cut_harder), _kept(omega, omega_cut)) == (4_000, 16_000)

    # What the model sampled from is the fitted request rendered, within the budget, where
    # the request as sent was over it.
    qwen = QwenAdapter()
    budget = SMALL_CONTEXT.prompt_budget(json.loads(first.request_json)["max_tokens"])
    assert budget == 8_000
    assert first.effective_request_json is None
    for call in (second, third):
        sent = MessagesRequest.model_validate_json(call.request_json)
        fitted = MessagesRequest.model_validate_json(call.effective_request_json)
        assert qwen.count_tokens(sent) > budget
        assert qwen.render(fitted).tokens == call.prompt_tokens
    assert all(len(call.prompt_tokens) <= budget for call in calls)
    decode = renderers.Qwen3().tokenizer.decode
    second_prompt, third_prompt = decode(second.prompt_tokens), decode(third.prompt_tokens)
    assert omission_marker(len(alpha) - 16_000) in second_prompt
    assert "alpha row 100:" in second_prompt and "alpha row 250:" not in second_prompt
    assert omission_marker(len(alpha) - 4_000) in third_prompt
    assert omission_marker(len(omega) - 16_000) in third_prompt
    assert "alpha row 100:" not in third_prompt and "omega row 250:" not in third_prompt

    # The second prompt extends the first call's prompt and completion; the third, whose
    # older listing was cut harder, breaks off inside that listing.
    assert _extends(second, first)
    assert not _extends(third, second)
    common = next(
        index
        for index, (a, b) in enumerate(zip(third.prompt_tokens, second.prompt_tokens, strict=False))
        if a != b
    )
    opening = len(first.prompt_tokens) + len(first.completion_tokens)
    assert opening < common < len(second.prompt_tokens)
    shared = decode(second.prompt_tokens[opening:common])
    assert "alpha row 001:" in shared and "characters omitted" not in shared

    standing = QualifiedAttempt(
        run_id=RUN,
        batch=BATCH,
        attempt_id=ATTEMPT,
        trial_id=TRIAL,
        group_index=0,
        task_name="synth/print-listings",
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
    hand = hand_datums(calls, ADVANTAGE)
    assert [datum.calls for datum in hand] == [[0, 1], [2]]
    assert [(row.agent_id, row.datum_index) for row in rows] == [("main", 0), ("main", 1)]
    for row, datum in zip(rows, hand, strict=True):
        assert_packed_as(row, datum)
    # The datum tokens are the prompts the model sampled from, with their sampled tokens.
    assert rows[0].model_input + rows[0].target_tokens[-1:] == (
        second.prompt_tokens + second.completion_tokens
    )
    assert rows[1].model_input + rows[1].target_tokens[-1:] == (
        third.prompt_tokens + third.completion_tokens
    )
    # The fitted tool result (token positions `opening` up to the second prompt's end) is
    # zero-weight context; its target positions are one lower.
    fitted_result = range(opening - 1, len(second.prompt_tokens) - 1)
    assert omission_marker(len(alpha) - 16_000) in decode(
        rows[0].target_tokens[fitted_result.start : fitted_result.stop]
    )
    assert {rows[0].advantages[index] for index in fitted_result} == {0.0}
    assert {rows[0].mask[index] for index in fitted_result} == {0.0}
    assert {rows[1].advantages[index] for index in range(len(third.prompt_tokens) - 1)} == {0.0}
    # Exactly the sampled tokens carry the advantage.
    sampled = sum(len(call.completion_tokens) for call in calls)
    assert sum(1 for row in rows for value in row.advantages if value == ADVANTAGE) == sampled
    assert sum(1 for row in rows for value in row.advantages if value) == sampled
