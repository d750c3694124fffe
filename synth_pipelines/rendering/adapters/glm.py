"""GLM 5.x: tml-renderers' `Glm53` (reasoning effort max, thinking cleared from history).

GLM 5.3 always opens its reply with `<think>`, so `thinking.type: disabled` renders the same
prompt; tool calls are `<tool_call>name<arg_key>..</arg_key><arg_value>..</arg_value>`.
"""

from __future__ import annotations

from tml_renderers import renderers

from synth_pipelines.rendering.adapters.completion import NativeSyntax, stop_token_ids
from synth_pipelines.rendering.adapters.tml_native import NativeFormat, TmlNativeAdapter


class GlmAdapter(TmlNativeAdapter):
    def __init__(self) -> None:
        renderer = renderers.Glm53()
        native = NativeFormat(
            family="glm",
            syntax=NativeSyntax(
                stop_token_ids=stop_token_ids(renderer),
                think_open="<think>",
                think_close="</think>",
                tool_call_open="<tool_call>",
                text_before_tool_calls="",
            ),
        )
        super().__init__(native, renderer, renderer)
