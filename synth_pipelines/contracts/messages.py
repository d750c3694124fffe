"""Anthropic Messages API shapes: the request the proxy accepts and the response it returns.

The models mirror Anthropic's documented shapes. Every request field is in one of three
states, and the two lists below are what the documentation quotes:

- honored: model, messages (including `role: "system"` entries), system, max_tokens, stream,
  temperature, top_p, top_k, stop_sequences, tools (custom tools, `defer_loading` included),
  tool_choice `auto`/`none`, thinking (`enabled` / `adaptive` / `disabled`, `display`);
- ignored, accepted and without effect: `IGNORED_FIELDS`;
- rejected with an `invalid_request_error` that names the field: `REJECTED_FIELDS`, and any
  field Anthropic does not document (`extra="forbid"` everywhere).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    Tag,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from synth_pipelines.contracts.api_errors import ErrorResponse, invalid_request, validation_error

IGNORED_FIELDS: dict[str, str] = {
    "cache_control": "prompt caching is Anthropic's; the proxy's own prefix cache needs no markers",
    "context_management": "the client keeps the history; the proxy renders what it is sent",
    "output_config.effort": "the native chat formats take no effort hint",
    "metadata": "kept in the captured request JSON, not rendered",
    "service_tier": "one service tier",
    "speed": "one speed",
    "inference_geo": "one region",
    "diagnostics": "no Anthropic prompt cache to diagnose",
    "user_profile_id": "identities come from the scoped credential",
    "workspace_id": "identities come from the scoped credential",
    "thinking.budget_tokens": "the sampler has no separate thinking budget; max_tokens bounds "
    "the whole completion",
    "tool_choice.disable_parallel_tool_use": "the native formats cannot limit the number of calls",
    "tools[].strict": "tool inputs are parsed from the model's own syntax, not constrained",
    "tools[].input_examples": "not part of the native tool declarations",
    "tools[].eager_input_streaming": "tool input is sent whole, after sampling",
    "tools[].allowed_callers": "every tool is called directly by the model",
    "text.citations": "no citation sources exist for the served models",
    "tool_use.caller": "every tool is called directly by the model",
    "tool_use.toolset_name": "toolsets are not rendered",
    "tool_result.toolset_name": "toolsets are not rendered",
    "tool_result.is_error": "the result text is rendered as sent; the native formats have no "
    "error flag",
    "redacted_thinking blocks": "opaque to this proxy, so not rendered",
}

REJECTED_FIELDS: dict[str, str] = {
    "container": "no code-execution containers behind this proxy",
    "mcp_servers": "no MCP connector behind this proxy; run MCP servers in the client",
    "output_config.format": "the native formats cannot constrain output to a JSON schema",
    "tools[].type (server tools)": "server tools (web search, code execution, ...) run at "
    "Anthropic; declare a custom tool instead",
    "tool_choice any / tool": "the native chat formats cannot force a tool call",
    "image, document and other non-text content": "the served models read text only",
    "a final assistant message (prefill)": "the native renderers start a fresh assistant turn",
}


class _Strict(BaseModel):
    """Anthropic's shapes, as strictly as Anthropic checks them: no unknown fields, and no
    coercion (`"5"` is not a number, `"yes"` is not a boolean)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _Refused(BaseModel):
    """A documented Anthropic shape this proxy always refuses: no JSON value matches its schema."""

    model_config = ConfigDict(extra="allow")

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"not": {}, "description": cls.__doc__ or ""}


_REFUSED_VALUE = WithJsonSchema({"type": "null"})
"""The schema of a field the proxy refuses unless it is null."""


class CacheControl(_Strict):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlockParam(_Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class ThinkingBlockParam(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlockParam(_Strict):
    type: Literal["redacted_thinking"]
    data: str


class ToolUseBlockParam(_Strict):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None
    toolset_name: str | None = None


class ToolReferenceBlockParam(_Strict):
    type: Literal["tool_reference"]
    tool_name: str
    cache_control: CacheControl | None = None


class UnsupportedBlock(_Refused):
    """Any content block type the proxy cannot render; validating one always fails."""

    type: str
    """Declared so that code over every block of a message may name its type."""

    @model_validator(mode="before")
    @classmethod
    def _refuse(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        if kind is None:
            raise PydanticCustomError(
                "unsupported_content",
                "content block has no `type`; send text, thinking, tool_use or tool_result blocks",
            )
        if kind in ("image", "document"):
            reason = "the served models are text-only; send the content as text instead"
        else:
            reason = "send text, thinking, tool_use or tool_result blocks"
        raise PydanticCustomError(
            "unsupported_content",
            "content block type {kind} is not supported: {reason}",
            {"kind": repr(kind), "reason": reason},
        )


def _tag_or_unsupported(supported: frozenset[str]) -> Discriminator:
    def discriminate(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return kind if kind in supported else "unsupported"

    return Discriminator(discriminate)


ToolResultContentBlock = Annotated[
    Annotated[TextBlockParam, Tag("text")]
    | Annotated[ToolReferenceBlockParam, Tag("tool_reference")]
    | Annotated[UnsupportedBlock, Tag("unsupported")],
    _tag_or_unsupported(frozenset({"text", "tool_reference"})),
]


def _text_as_blocks(value: Any) -> Any:
    """Anthropic's shorthand: a plain string is one text block."""
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


def _text_or_blocks(block: Any) -> BeforeValidator:
    return BeforeValidator(_text_as_blocks, json_schema_input_type=str | list[block])


class ToolResultBlockParam(_Strict):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Annotated[list[ToolResultContentBlock], _text_or_blocks(ToolResultContentBlock)] = (
        Field(default_factory=list)
    )
    is_error: bool = False
    cache_control: CacheControl | None = None
    toolset_name: str | None = None


RequestBlock = Annotated[
    Annotated[TextBlockParam, Tag("text")]
    | Annotated[ThinkingBlockParam, Tag("thinking")]
    | Annotated[RedactedThinkingBlockParam, Tag("redacted_thinking")]
    | Annotated[ToolUseBlockParam, Tag("tool_use")]
    | Annotated[ToolResultBlockParam, Tag("tool_result")]
    | Annotated[UnsupportedBlock, Tag("unsupported")],
    _tag_or_unsupported(
        frozenset({"text", "thinking", "redacted_thinking", "tool_use", "tool_result"})
    ),
]


class MessageParam(_Strict):
    role: Literal["user", "assistant", "system"]
    content: Annotated[list[RequestBlock], _text_or_blocks(RequestBlock)]

    @model_validator(mode="after")
    def _system_is_text(self) -> MessageParam:
        if self.role == "system" and not all(isinstance(b, TextBlockParam) for b in self.content):
            raise PydanticCustomError(
                "unsupported_content",
                "a role 'system' message may hold text blocks only",
            )
        return self


class ToolParam(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.:-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any] = Field(
        json_schema_extra={"properties": {"type": {"const": "object"}}, "required": ["type"]}
    )
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None
    defer_loading: bool = False
    strict: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    eager_input_streaming: bool | None = None
    allowed_callers: list[str] | None = None

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("type") != "object":
            raise PydanticCustomError(
                "unsupported_field",
                'input_schema must be a JSON schema with "type": "object" (got type {kind})',
                {"kind": repr(schema.get("type"))},
            )
        return schema

    def declaration(self) -> dict[str, Any]:
        """The tool as the native formats declare it: OpenAI-style function JSON."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description or "",
                "parameters": self.input_schema,
            },
        }


def _refuse_server_tools(value: Any) -> Any:
    if isinstance(value, list):
        for index, tool in enumerate(value):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind not in (None, "custom"):
                raise PydanticCustomError(
                    "unsupported_field",
                    "tools.{index}: server tool type {kind} is not supported: server tools run "
                    "at Anthropic; declare a custom tool with name, description and input_schema",
                    {"index": index, "kind": repr(kind)},
                )
    return value


class ThinkingEnabled(_Strict):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024)
    display: Literal["summarized", "omitted"] | None = None


class ThinkingAdaptive(_Strict):
    type: Literal["adaptive"]
    display: Literal["summarized", "omitted"] | None = None


class ThinkingDisabled(_Strict):
    type: Literal["disabled"]


ThinkingConfig = Annotated[
    ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled, Field(discriminator="type")
]


class ToolChoiceAuto(_Strict):
    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(_Strict):
    type: Literal["none"]


class ToolChoiceForced(_Refused):
    """`any` and `tool`: documented by Anthropic, refused here."""

    type: Literal["any", "tool"]

    @model_validator(mode="after")
    def _refuse(self) -> ToolChoiceForced:
        raise PydanticCustomError(
            "unsupported_field",
            "tool_choice type {kind} is not supported: the native chat formats cannot force a "
            "tool call; use 'auto' or 'none'",
            {"kind": repr(self.type)},
        )


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceNone | ToolChoiceForced, Field(discriminator="type")
]


class Metadata(_Strict):
    user_id: str | None = None


class OutputConfig(_Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: Annotated[dict[str, Any] | None, _REFUSED_VALUE] = None

    @field_validator("format")
    @classmethod
    def _refuse_format(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise PydanticCustomError(
                "unsupported_field",
                "structured output formats are not supported: the native chat formats cannot "
                "constrain output to a JSON schema; describe the format in the prompt instead",
            )


def _refuse_if_set(field: str, reason: str) -> BeforeValidator:
    def refuse(value: Any) -> Any:
        if value is not None:
            raise PydanticCustomError(
                "unsupported_field",
                "{field} is not supported: {reason}",
                {"field": field, "reason": reason},
            )
        return value

    return BeforeValidator(refuse, json_schema_input_type=None)


class CountTokensRequest(_Strict):
    """The conversation part of a request: what is rendered and counted."""

    model: str = Field(min_length=1)
    messages: list[MessageParam] = Field(json_schema_extra={"minItems": 1})
    system: Annotated[list[TextBlockParam], _text_or_blocks(TextBlockParam)] = Field(
        default_factory=list
    )
    tools: Annotated[list[ToolParam], BeforeValidator(_refuse_server_tools)] = Field(
        default_factory=list
    )
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    context_management: dict[str, Any] | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None
    mcp_servers: Annotated[Any, _refuse_if_set("mcp_servers", REJECTED_FIELDS["mcp_servers"])] = (
        None
    )

    @field_validator("messages")
    @classmethod
    def _not_empty(cls, messages: list[MessageParam]) -> list[MessageParam]:
        if not messages:
            raise PydanticCustomError(
                "unsupported_field", "at least one message is required; send a user message"
            )
        return messages

    @model_validator(mode="after")
    def _unique_tool_names(self) -> CountTokensRequest:
        seen: set[str] = set()
        for tool in self.tools:
            if tool.name in seen:
                raise PydanticCustomError(
                    "unsupported_field",
                    "tools: tool name {name} is declared twice; tool names must be unique",
                    {"name": repr(tool.name)},
                )
            seen.add(tool.name)
        return self

    @property
    def thinking_enabled(self) -> bool:
        """Anthropic's default without `thinking` is no thinking."""
        return isinstance(self.thinking, ThinkingEnabled | ThinkingAdaptive)

    @property
    def thinking_display(self) -> Literal["summarized", "omitted"]:
        if isinstance(self.thinking, ThinkingEnabled | ThinkingAdaptive) and self.thinking.display:
            return self.thinking.display
        return "summarized"


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=1)
    stop_sequences: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    speed: Literal["standard", "fast"] | None = None
    inference_geo: str | None = None
    diagnostics: dict[str, Any] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None
    container: Annotated[Any, _refuse_if_set("container", REJECTED_FIELDS["container"])] = None


def parse_messages_request(body: bytes | str) -> MessagesRequest:
    """`POST /v1/messages` body -> request; a `ApiError` (400) says what is wrong."""
    return _parse(MessagesRequest, body)


def parse_count_tokens_request(body: bytes | str) -> CountTokensRequest:
    """`POST /v1/messages/count_tokens` body -> request; a `ApiError` (400) on bad input."""
    return _parse(CountTokensRequest, body)


def _parse[RequestT: BaseModel](model: type[RequestT], body: bytes | str) -> RequestT:
    try:
        decoded = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise invalid_request(f"request body must be a JSON object, got {type(decoded).__name__}")
    try:
        return model.model_validate(decoded)
    except ValidationError as exc:
        raise validation_error(exc) from None


# Response shapes.

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str
    citations: list[dict[str, Any]] | None = None


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock]
    model: str
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: Usage


class CountTokensResponse(BaseModel):
    input_tokens: int


# Server-sent events, in the order Anthropic sends them.


class MessageStartEvent(BaseModel):
    type: Literal["message_start"] = "message_start"
    message: Message


class PingEvent(BaseModel):
    type: Literal["ping"] = "ping"


class ContentBlockStartEvent(BaseModel):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock


class TextDelta(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class InputJSONDelta(BaseModel):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ThinkingDelta(BaseModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(BaseModel):
    type: Literal["signature_delta"] = "signature_delta"
    signature: str


ContentDelta = Annotated[
    TextDelta | InputJSONDelta | ThinkingDelta | SignatureDelta, Field(discriminator="type")
]


class ContentBlockDeltaEvent(BaseModel):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: ContentDelta


class ContentBlockStopEvent(BaseModel):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDelta(BaseModel):
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None


class MessageDeltaUsage(BaseModel):
    output_tokens: int
    input_tokens: int | None = None


class MessageDeltaEvent(BaseModel):
    type: Literal["message_delta"] = "message_delta"
    delta: MessageDelta
    usage: MessageDeltaUsage


class MessageStopEvent(BaseModel):
    type: Literal["message_stop"] = "message_stop"


StreamEvent = (
    MessageStartEvent
    | PingEvent
    | ContentBlockStartEvent
    | ContentBlockDeltaEvent
    | ContentBlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
)


def content_block_events(index: int, block: ContentBlock) -> list[StreamEvent]:
    """One finished block as Anthropic streams it: start (empty), its deltas, stop."""
    events: list[StreamEvent] = []
    if isinstance(block, TextBlock):
        events.append(ContentBlockStartEvent(index=index, content_block=TextBlock(text="")))
        events.append(ContentBlockDeltaEvent(index=index, delta=TextDelta(text=block.text)))
    elif isinstance(block, ThinkingBlock):
        empty_thinking = ThinkingBlock(thinking="", signature="")
        events.append(ContentBlockStartEvent(index=index, content_block=empty_thinking))
        if block.thinking:
            delta = ThinkingDelta(thinking=block.thinking)
            events.append(ContentBlockDeltaEvent(index=index, delta=delta))
        events.append(
            ContentBlockDeltaEvent(index=index, delta=SignatureDelta(signature=block.signature))
        )
    else:
        empty_tool_use = ToolUseBlock(id=block.id, name=block.name, input={})
        events.append(ContentBlockStartEvent(index=index, content_block=empty_tool_use))
        arguments = json.dumps(block.input, ensure_ascii=False)
        events.append(
            ContentBlockDeltaEvent(index=index, delta=InputJSONDelta(partial_json=arguments))
        )
    events.append(ContentBlockStopEvent(index=index))
    return events


def sse_frame(event: StreamEvent | ErrorResponse) -> bytes:
    """`event: <type>` and `data: <json>` lines, the framing Anthropic's SDKs parse."""
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()
