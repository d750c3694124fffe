"""Qwen3: the official Qwen3 chat template, rendered as runs so the prefix cache can reuse ids.

The runs reproduce the template shipped with the Qwen3 tokenizer (`tokenizer_config.json`'s
`chat_template`: tools in the system turn, `<tool_call>` JSON, tool results grouped into one
user turn of `<tool_response>` blocks, thinking kept for the assistant turns after the last
user query, an empty thinking block when thinking is off). Template markup becomes special
tokens; message text is always ordinary tokens, so text that spells `<|im_end|>` cannot end a
turn. Tokens come from tml-renderers' native Qwen3 tokenizer, completions are read by its
Qwen3 parser.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tml_renderers import chat, renderers
from tml_renderers.renderer import Parser

from synth_pipelines.contracts.messages import CountTokensRequest
from synth_pipelines.rendering.adapters.base import (
    Family,
    ParsedCompletion,
    RenderedPrompt,
    SamplerStopReason,
)
from synth_pipelines.rendering.adapters.completion import (
    NativeSyntax,
    parse_completion,
    stop_token_ids,
)
from synth_pipelines.rendering.adapters.conversation import (
    AssistantTurn,
    Conversation,
    SystemTurn,
    ToolResultTurn,
    Turn,
    UserTurn,
    conversation_from_request,
)
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache, Run, encode_runs
from synth_pipelines.rendering.segment_cache import line_starts

_TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within "
)
_TOOL_CALL_SHAPE = '\n{"name": <function-name>, "arguments": <args-json-object>}\n'
_PARSER_PROBE = [chat.Message(chat.Text(""), chat.Author(chat.AuthorKind.User))]


class QwenAdapter:
    family: Family = "qwen"

    def __init__(self) -> None:
        renderer = renderers.Qwen3()
        self._renderer = renderer
        self._tokenizer = renderer.tokenizer
        special = self._tokenizer.encode_special
        self._im_start = special("<|im_start|>")
        self._im_end = special("<|im_end|>")
        self._think = special("<think>")
        self._think_end = special("</think>")
        self._tool_call = special("<tool_call>")
        self._tool_call_end = special("</tool_call>")
        self._tool_response = special("<tool_response>")
        self._tool_response_end = special("</tool_response>")
        stop_ids = stop_token_ids(renderer)
        self._stop_ids = stop_ids
        self._stop_strings = tuple(self._tokenizer.decode([token]) for token in stop_ids)
        self._syntax = NativeSyntax(
            stop_token_ids=stop_ids,
            think_open="<think>",
            think_close="</think>",
            tool_call_open="<tool_call>",
            text_before_tool_calls="\n",
        )

    def render(
        self,
        request: CountTokensRequest,
        *,
        prefix_cache: PrefixCache | None = None,
        scope: CacheScope | None = None,
    ) -> RenderedPrompt:
        conversation = conversation_from_request(request)
        runs = self.runs(conversation)
        if prefix_cache is not None and scope is not None:
            tokens, reused = prefix_cache.tokenize(
                scope, runs, self._tokenizer.encode_ordinary, split=line_starts
            )
        else:
            tokens, reused = encode_runs(runs, self._tokenizer.encode_ordinary), 0
        return RenderedPrompt(
            tokens=tokens,
            stop_token_ids=self._stop_ids,
            stop_strings=self._stop_strings,
            thinking=conversation.thinking,
            thinking_prefilled=False,
            reused_prefix_tokens=reused,
            parser=self._new_parser(),
        )

    def count_tokens(self, request: CountTokensRequest) -> int:
        return self.render(request).prompt_tokens

    def _new_parser(self) -> Parser:
        """tml-renderers hands out a parser only with a render, and a parser is not safe to
        share between threads, so each prompt gets its own from a one-message probe."""
        _, parser = self._renderer.render_for_completion(_PARSER_PROBE)
        return parser

    def count_text(self, text: str) -> int:
        return len(self._tokenizer.encode_ordinary(text))

    def parse(
        self,
        rendered: RenderedPrompt,
        completion_tokens: Sequence[int],
        sampler_stop_reason: SamplerStopReason,
        stop_sequences: Sequence[str] = (),
    ) -> ParsedCompletion:
        return parse_completion(
            completion_tokens,
            sampler_stop_reason,
            stop_sequences,
            parser=rendered.parser,
            tokenizer=self._tokenizer,
            syntax=self._syntax,
            thinking_prefilled=rendered.thinking_prefilled,
        )

    def runs(self, conversation: Conversation) -> list[Run]:
        """The prompt as special-token ids and the ordinary text between them."""
        out = _RunWriter()
        turns = conversation.turns
        leading_system = turns[0].text if isinstance(turns[0], SystemTurn) else None
        if conversation.tools:
            self._write_tools_system_turn(out, leading_system, conversation)
        elif leading_system is not None:
            self._write_plain_turn(out, "system", leading_system)
        last_query = _last_query_index(turns)
        for index, turn in enumerate(turns):
            if index == 0 and leading_system is not None:
                continue
            if isinstance(turn, SystemTurn):
                self._write_plain_turn(out, "system", turn.text)
            elif isinstance(turn, UserTurn):
                self._write_plain_turn(out, "user", turn.text)
            elif isinstance(turn, AssistantTurn):
                self._write_assistant_turn(out, turn, keep_thinking=index > last_query)
            else:
                self._write_tool_result(out, turns, index, turn)
        out.special(self._im_start)
        out.text("assistant\n")
        if not conversation.thinking:
            out.special(self._think)
            out.text("\n\n")
            out.special(self._think_end)
            out.text("\n\n")
        return out.finish()

    def _write_tools_system_turn(
        self, out: _RunWriter, leading_system: str | None, conversation: Conversation
    ) -> None:
        out.special(self._im_start)
        out.text("system\n")
        if leading_system is not None:
            out.text(leading_system + "\n\n")
        out.text(_TOOLS_INTRO)
        for tool in conversation.tools:
            out.text("\n" + _tojson(tool.declaration()))
        out.text(_TOOLS_OUTRO)
        out.special(self._tool_call)
        out.special(self._tool_call_end)
        out.text(" XML tags:\n")
        out.special(self._tool_call)
        out.text(_TOOL_CALL_SHAPE)
        out.special(self._tool_call_end)
        out.special(self._im_end)
        out.text("\n")

    def _write_plain_turn(self, out: _RunWriter, role: str, text: str) -> None:
        out.special(self._im_start)
        out.text(f"{role}\n{text}")
        out.special(self._im_end)
        out.text("\n")

    def _write_assistant_turn(
        self, out: _RunWriter, turn: AssistantTurn, keep_thinking: bool
    ) -> None:
        out.special(self._im_start)
        out.text("assistant\n")
        if keep_thinking and turn.thinking:
            out.special(self._think)
            out.text("\n" + turn.thinking.strip("\n") + "\n")
            out.special(self._think_end)
            out.text("\n\n" + turn.text.lstrip("\n"))
        else:
            out.text(turn.text)
        for position, call in enumerate(turn.tool_calls):
            if position > 0 or turn.text:
                out.text("\n")
            out.special(self._tool_call)
            out.text(f'\n{{"name": "{call.name}", "arguments": {_tojson(call.arguments)}}}\n')
            out.special(self._tool_call_end)
        out.special(self._im_end)
        out.text("\n")

    def _write_tool_result(
        self, out: _RunWriter, turns: tuple[Turn, ...], index: int, turn: ToolResultTurn
    ) -> None:
        if index == 0 or not isinstance(turns[index - 1], ToolResultTurn):
            out.special(self._im_start)
            out.text("user")
        out.text("\n")
        out.special(self._tool_response)
        out.text(f"\n{turn.text}\n")
        out.special(self._tool_response_end)
        if index == len(turns) - 1 or not isinstance(turns[index + 1], ToolResultTurn):
            out.special(self._im_end)
            out.text("\n")


class _RunWriter:
    """Collects template output, merging adjacent text into one run as the tokenizer sees it."""

    def __init__(self) -> None:
        self._runs: list[Run] = []
        self._pending: list[str] = []

    def text(self, text: str) -> None:
        if text:
            self._pending.append(text)

    def special(self, token_id: int) -> None:
        self._flush()
        self._runs.append(token_id)

    def finish(self) -> list[Run]:
        self._flush()
        return self._runs

    def _flush(self) -> None:
        if self._pending:
            self._runs.append("".join(self._pending))
            self._pending = []


def _last_query_index(turns: tuple[Turn, ...]) -> int:
    """The template's `last_query_index`: thinking after it is kept, before it dropped."""
    for index in range(len(turns) - 1, -1, -1):
        turn = turns[index]
        if isinstance(turn, UserTurn) and not (
            turn.text.startswith("<tool_response>") and turn.text.endswith("</tool_response>")
        ):
            return index
    return len(turns) - 1


def _tojson(value: Any) -> str:
    """The template's `tojson` filter as transformers defines it."""
    return json.dumps(value, ensure_ascii=False)
