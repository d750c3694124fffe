"""Kimi K2 Thinking: tml-renderers' `KimiK2`.

Kimi identifies a tool call as `functions.<name>:<n>`, n counting the calls of the
conversation from 0; history is rendered with those ids whatever ids the client carries.
The model always thinks, so `thinking.type: disabled` renders the same prompt.
"""

from __future__ import annotations

from tml_renderers import renderers

from synth_pipelines.rendering.adapters.completion import NativeSyntax, stop_token_ids
from synth_pipelines.rendering.adapters.conversation import ToolCall
from synth_pipelines.rendering.adapters.tml_native import NativeFormat, TmlNativeAdapter


def kimi_tool_id(position: int, call: ToolCall) -> str:
    return f"functions.{call.name}:{position}"


class KimiAdapter(TmlNativeAdapter):
    def __init__(self) -> None:
        renderer = renderers.KimiK2()
        native = NativeFormat(
            family="kimi",
            syntax=NativeSyntax(
                stop_token_ids=stop_token_ids(renderer),
                think_open="<think>",
                think_close="</think>",
                tool_call_open="<|tool_calls_section_begin|>",
                text_before_tool_calls="",
            ),
            native_tool_id=kimi_tool_id,
        )
        super().__init__(native, renderer, renderer)
