"""Worked examples as training datums, rendered exactly as the harness would send them.

A task may carry a demonstration in `solution/demonstration.json`: the conversation that
follows its instruction, as Anthropic Messages (`{"messages": [...]}`, assistant turns
and the tool results the harness returns to them). Each assistant turn becomes one datum:
the prompt the capture proxy would render for the turn, in the model's native format,
followed by the completion tokens that turn is written as when it is history. A completion
must parse back, through the same adapter, into the demonstrated content; otherwise the
demonstration is refused rather than learned in a form the model would never produce.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from proxy.adapters.base import ModelAdapter, RenderedPrompt
from proxy.errors import ProxyError
from proxy.messages import MessagesRequest
from synth_pipelines.contracts.profile import Profile

DEMONSTRATION_FILE = Path("solution") / "demonstration.json"
# A user turn after the last assistant turn, so that it renders as history.
_FOLLOWING = {"role": "user", "content": "Continue."}


class DemonstrationError(ValueError):
    """A demonstration that is missing, malformed, or does not round-trip through the adapter."""


class _DemonstrationFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]


@dataclass(frozen=True)
class Demonstration:
    task: str
    instruction: str
    messages: list[dict[str, Any]]


@dataclass(frozen=True)
class HarnessFrame:
    """What the harness sends around the conversation: system prompt, tools, thinking."""

    system: str
    tools: list[dict[str, Any]]
    max_tokens: int


@dataclass(frozen=True)
class DemonstrationTurn:
    prompt: list[int]
    completion: list[int]


def harness_frame(profile: Profile) -> HarnessFrame:
    """The request frame of the profile's harness. Only the built-in agent's frame is
    known without running it; a warm start for another engine is refused."""
    if profile.engine != "builtin":
        raise DemonstrationError(
            f"profile {profile.name}@{profile.version} uses the {profile.engine!r} engine; "
            "a warm start renders demonstrations in the built-in agent's frame, so the actor "
            "must use the 'builtin' engine"
        )
    from synth_pipelines.agents.builtin import SYSTEM, TOOLS

    args = list(profile.args)
    system = args[args.index("--system") + 1] if "--system" in args[:-1] else SYSTEM
    max_tokens = int(args[args.index("--max-tokens") + 1]) if "--max-tokens" in args[:-1] else 512
    return HarnessFrame(system=system, tools=TOOLS, max_tokens=max_tokens)


def read_demonstration(task_dir: Path) -> Demonstration:
    path = task_dir / DEMONSTRATION_FILE
    try:
        document = _DemonstrationFile.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise DemonstrationError(
            f"task {task_dir.name} has no {DEMONSTRATION_FILE}; a warm start needs one per task"
        ) from None
    except ValidationError as error:
        raise DemonstrationError(f"task {task_dir.name}: {DEMONSTRATION_FILE}: {error}") from None
    roles = [message.get("role") for message in document.messages]
    if not roles or roles[0] != "assistant" or roles[-1] != "assistant":
        raise DemonstrationError(
            f"task {task_dir.name}: {DEMONSTRATION_FILE} must start and end with an assistant "
            f"turn (it has roles {roles})"
        )
    instruction = (task_dir / "instruction.md").read_text()
    return Demonstration(task_dir.name, instruction, document.messages)


def frame_request(frame: HarnessFrame, messages: list[dict[str, Any]]) -> MessagesRequest:
    return MessagesRequest.model_validate(
        {
            "model": "demonstration",
            "max_tokens": frame.max_tokens,
            "system": frame.system,
            "tools": frame.tools,
            "thinking": {"type": "disabled"},
            "messages": messages,
        }
    )


def _common_prefix(first: list[int], second: list[int]) -> int:
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length


def _content(blocks: list[dict[str, Any]] | str) -> list[tuple[str, str]]:
    """A turn's content, as the parts a parse must reproduce (tool-use ids aside)."""
    if isinstance(blocks, str):
        blocks = [{"type": "text", "text": blocks}]
    parts = []
    for block in blocks:
        if block["type"] == "text" and block["text"].strip():
            parts.append(("text", block["text"].strip()))
        elif block["type"] == "tool_use":
            parts.append((block["name"], json.dumps(block["input"], sort_keys=True)))
    return parts


def _parsed(adapter: ModelAdapter, prompt: RenderedPrompt, completion: list[int]):
    parsed = adapter.parse(prompt, completion, "stop")
    return [
        ("text", block.text.strip())
        if block.type == "text"
        else (block.name, json.dumps(dict(block.input), sort_keys=True))
        for block in parsed.content
        if block.type == "tool_use" or (block.type == "text" and block.text.strip())
    ]


def demonstration_turns(
    adapter: ModelAdapter, frame: HarnessFrame, demonstration: Demonstration
) -> list[DemonstrationTurn]:
    """One (prompt, completion) per assistant turn, in the model's own tokens."""
    conversation = [{"role": "user", "content": demonstration.instruction}, *demonstration.messages]
    turns = []
    for k, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        following = conversation[k + 1] if k + 1 < len(conversation) else _FOLLOWING
        try:
            prompt = adapter.render(frame_request(frame, conversation[:k]))
            history = adapter.render(
                frame_request(frame, [*conversation[: k + 1], following])
            ).tokens
        except (ProxyError, ValidationError) as error:
            raise DemonstrationError(
                f"task {demonstration.task}: turn {k} cannot be rendered: {error}"
            ) from None
        start = _common_prefix(prompt.tokens, history)
        stops = [i for i in range(start, len(history)) if history[i] in prompt.stop_token_ids]
        if not stops:
            raise DemonstrationError(
                f"task {demonstration.task}: turn {k} has no end-of-turn token when rendered"
            )
        completion = history[start : stops[0] + 1]
        if _parsed(adapter, prompt, completion) != _content(message["content"]):
            raise DemonstrationError(
                f"task {demonstration.task}: turn {k} does not parse back into the demonstrated "
                "content through the model's adapter; it cannot be learned as written"
            )
        turns.append(DemonstrationTurn(prompt.tokens, completion))
    return turns
