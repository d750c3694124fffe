"""Context fitting: oversized observations shrink with a marker until the prompt fits."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from claude_code_requests import tool_result_request, tool_round_trip

from proxy.context_fit import fit_to_context, omission_marker
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import MessagesRequest, TextBlockParam, ToolResultBlockParam
from synth_pipelines.rendering.adapters.qwen import QwenAdapter
from synth_pipelines.rendering.model_registry import ModelEntry, TinkerRoute

SMALL = ModelEntry(
    id="test/qwen-16k",
    family="qwen",
    context_window=16_000,
    max_output_tokens=2_000,
    backend=TinkerRoute(base_model="test/qwen-16k"),
    trainable=True,
)
ROOMY = SMALL.model_copy(update={"id": "test/qwen-32k", "context_window": 32_000})


@pytest.fixture(scope="module")
def qwen() -> QwenAdapter:
    return QwenAdapter()


def _huge_output(tag: str, lines: int = 1_500) -> str:
    return "\n".join(
        f"{tag} line {number:05d}: value={number * 7919 % 100_003}" for number in range(lines)
    )


def _with_results(*outputs: str) -> dict[str, Any]:
    body = tool_result_request()
    for turn, output in enumerate(outputs, start=1):
        assistant, user = tool_round_trip(turn)
        user["content"][0]["content"] = output
        body["messages"] += [assistant, user]
    return body


def _result_text(request: MessagesRequest, message_index: int) -> str:
    block = request.messages[message_index].content[0]
    assert isinstance(block, ToolResultBlockParam)
    item = block.content[0]
    assert isinstance(item, TextBlockParam)
    return item.text


def test_a_prompt_that_fits_is_returned_untouched(qwen: QwenAdapter) -> None:
    request = MessagesRequest.model_validate(tool_result_request())

    fit = fit_to_context(request, SMALL, qwen)

    assert fit.request is request and fit.omissions == ()
    assert fit.prompt_tokens == qwen.count_tokens(request)
    assert fit.budget == 16_000 - 2_000  # max_tokens 32000 is capped by the output limit
    rendered = qwen.render(request)
    assert fit_to_context(request, SMALL, qwen, rendered.prompt_tokens).request is request


def test_oversized_tool_result_is_cut_with_a_marker_until_it_fits(qwen: QwenAdapter) -> None:
    huge = _huge_output("big")
    request = MessagesRequest.model_validate(_with_results(huge))
    assert qwen.count_tokens(request) > ROOMY.prompt_budget(request.max_tokens)

    fit = fit_to_context(request, ROOMY, qwen)

    assert fit.prompt_tokens <= fit.budget
    assert fit.prompt_tokens == qwen.count_tokens(fit.request)
    shrunk = _result_text(fit.request, 5)
    omitted = len(huge) - 16_000
    assert shrunk.startswith(huge[:1000]) and shrunk.endswith(huge[-1000:])
    assert omission_marker(omitted) in shrunk
    assert "characters omitted by the proxy to fit the model's context" in shrunk
    (omission,) = fit.omissions
    assert (omission.message_index, omission.block_index, omission.content_index) == (5, 0, 0)
    assert (omission.kind, omission.original_characters, omission.kept_characters) == (
        "tool_result",
        len(huge),
        16_000,
    )
    assert _result_text(request, 5) == huge


def test_oldest_oversized_result_is_cut_first_and_hardest(qwen: QwenAdapter) -> None:
    older, newer = _huge_output("old"), _huge_output("new")
    request = MessagesRequest.model_validate(_with_results(older, newer))

    fit = fit_to_context(request, ROOMY, qwen)

    kept = {omission.message_index: omission.kept_characters for omission in fit.omissions}
    assert kept == {5: 4_000, 7: 16_000}
    assert fit.prompt_tokens <= fit.budget


def test_expanded_skill_content_is_shrinkable(qwen: QwenAdapter) -> None:
    body = tool_result_request()
    skill = _huge_output("skill")
    body["messages"] += [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_s", "name": "Skill", "input": {"skill": "pdf"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_s",
                    "content": "Launching skill: pdf",
                },
                {"type": "text", "text": skill},
            ],
        },
    ]
    request = MessagesRequest.model_validate(body)

    fit = fit_to_context(request, SMALL, qwen)

    (omission,) = fit.omissions
    assert (omission.kind, omission.message_index, omission.block_index) == ("skill_content", 5, 1)
    assert omission.content_index is None
    assert fit.prompt_tokens <= fit.budget


def test_later_turns_cut_history_the_same_way(qwen: QwenAdapter) -> None:
    body = _with_results(_huge_output("big"))
    first = fit_to_context(MessagesRequest.model_validate(body), SMALL, qwen)
    body["messages"] += tool_round_trip(9)

    second = fit_to_context(MessagesRequest.model_validate(copy.deepcopy(body)), SMALL, qwen)

    assert _result_text(second.request, 5) == _result_text(first.request, 5)


def test_prompt_that_cannot_fit_is_a_clear_invalid_request(qwen: QwenAdapter) -> None:
    body = tool_result_request()
    body["system"].append({"type": "text", "text": _huge_output("system", 1_200)})
    request = MessagesRequest.model_validate(body)

    with pytest.raises(ApiError) as caught:
        fit_to_context(request, SMALL, qwen)

    assert caught.value.status_code == 400
    assert caught.value.message.startswith(
        f"prompt is too long: {qwen.count_tokens(request)} tokens > 14000 maximum"
    )
