"""DeepSeek V3.1: tml-renderers' `DeepSeekV31`, tools described in the system prompt.

DeepSeek V3.1's template declares no tools itself; its model card asks for them in the system
prompt as `### name` / `Description:` / `Parameters:` sections followed by the call format,
the wording tinker-cookbook's DeepSeek renderer uses. Thinking on renders with the thinking
renderer (`<think>` opens the reply), off with `</think>`.
"""

from __future__ import annotations

import json

from tml_renderers import renderers

from synth_pipelines.contracts.messages import ToolParam
from synth_pipelines.rendering.adapters.completion import NativeSyntax
from synth_pipelines.rendering.adapters.tml_native import NativeFormat, TmlNativeAdapter


def special_token(words: str) -> str:
    """`"tool calls begin"` -> DeepSeek's spelling, with a fullwidth bar (U+FF5C) on each side
    and U+2581 between words."""
    return "<\uff5c" + words.replace(" ", "\u2581") + "\uff5c>"


_CALL_FORMAT = (
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    f"{special_token('tool calls begin')}{special_token('tool call begin')}tool_call_name"
    f"{special_token('tool sep')}tool_call_arguments{special_token('tool call end')}"
    f"{special_token('tool calls end')}\n\n"
    "Where:\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters "
    "Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces"
)


def tools_system_text(tools: tuple[ToolParam, ...]) -> str:
    sections = "\n".join(
        f"### {tool.name}\nDescription: {tool.description or ''}\n\n"
        f"Parameters: {json.dumps(tool.input_schema, ensure_ascii=False)}"
        for tool in tools
    )
    return f"\n\n## Tools\nYou have access to the following tools:\n\n{sections}\n\n{_CALL_FORMAT}"


class DeepSeekAdapter(TmlNativeAdapter):
    def __init__(self) -> None:
        renderer = renderers.DeepSeekV31()
        special = renderer.tokenizer.encode_special
        self._end_of_sentence = special(special_token("end of sentence"))
        self._tool_calls_begin = special(special_token("tool calls begin"))
        native = NativeFormat(
            family="deepseek",
            syntax=NativeSyntax(
                stop_token_ids=(self._end_of_sentence,),
                think_open="<think>",
                think_close="</think>",
                tool_call_open=special_token("tool calls begin"),
                text_before_tool_calls="",
            ),
            system_tools_text=tools_system_text,
        )
        super().__init__(native, renderer, renderers.DeepSeekV31.thinking())

    def adjust_tokens(self, tokens: list[int]) -> list[int]:
        """tml-renderers 0.2.1 ends an assistant turn's text with end-of-sentence before its
        tool calls; the official template writes text and calls as one turn."""
        return [
            token
            for position, token in enumerate(tokens)
            if not (
                token == self._end_of_sentence
                and position + 1 < len(tokens)
                and tokens[position + 1] == self._tool_calls_begin
            )
        ]
