"""Worked examples, in the model's own tokens.

A task may carry a demonstration in `solution/demonstration.json` (for the built-in agent)
or `solution/demonstration.<engine>.json` (for a native harness, in its own tools): the
conversation that follows its instruction, as Anthropic Messages (`{"messages": [...]}`,
assistant turns and the tool results the harness returns to them). Each assistant turn is
written as the completion tokens that turn is rendered as when it is history; a completion
must parse back, through the same adapter, into the demonstrated content, otherwise the
demonstration is refused rather than learned in a form the model would never produce.

For the built-in agent, whose request frame is known, each turn becomes a datum with the
prompt the capture proxy would render. A native harness's frame (its system prompt, tool
definitions and whatever it adds between calls) is only known by running it, so its turns
become a teacher's script instead (`teacher_script`): the harness runs against the teacher,
the proxy captures what it actually sent, and the warm start learns from those captures.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.messages import MessagesRequest
from synth_pipelines.contracts.profile import Profile
from synth_pipelines.rendering.adapters.base import ModelAdapter, RenderedPrompt

DEMONSTRATION_FILE = Path("solution") / "demonstration.json"
TOOL_RESPONSE = "<tool_response>"
"""How a tool result opens in the Qwen family's prompt: a teacher's script counts them to
tell an attempt's turns apart."""
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
            "its request frame is only known by running it, so warm-start it from the captured "
            "calls of a run of the same profile against a teacher (the plan's `captured_run`; "
            "see `synth model teach`)"
        )
    from synth_pipelines.agents.builtin import SYSTEM, TOOLS

    args = list(profile.args)
    system = args[args.index("--system") + 1] if "--system" in args[:-1] else SYSTEM
    max_tokens = int(args[args.index("--max-tokens") + 1]) if "--max-tokens" in args[:-1] else 512
    return HarnessFrame(system=system, tools=TOOLS, max_tokens=max_tokens)


def demonstration_file(engine: str) -> Path:
    """Where a task keeps its demonstration for the harness of `engine`."""
    if engine == "builtin":
        return DEMONSTRATION_FILE
    return DEMONSTRATION_FILE.with_name(f"demonstration.{engine}.json")


def read_demonstration(task_dir: Path, engine: str = "builtin") -> Demonstration:
    relative = demonstration_file(engine)
    path = task_dir / relative
    try:
        document = _DemonstrationFile.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise DemonstrationError(
            f"task {task_dir.name} has no {relative}; a warm start needs one per task"
        ) from None
    except ValidationError as error:
        raise DemonstrationError(f"task {task_dir.name}: {relative}: {error}") from None
    roles = [message.get("role") for message in document.messages]
    if not roles or roles[0] != "assistant" or roles[-1] != "assistant":
        raise DemonstrationError(
            f"task {task_dir.name}: {relative} must start and end with an assistant "
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


def _parsed(
    adapter: ModelAdapter, prompt: RenderedPrompt, completion: list[int]
) -> list[tuple[str, str]]:
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
        except (ApiError, ValidationError) as error:
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


def teacher_script(adapter: ModelAdapter, demonstration: Demonstration) -> list[dict[str, Any]]:
    """Scripted-service entries that answer a harness's calls on this task with its
    demonstration: turn k's completion tokens for a prompt that holds the task's
    instruction followed by exactly k tool results. Entries repeat, so a harness that
    retries a call gets the same answer."""
    # The harness's own frame is unknown here; a turn's completion does not depend on it.
    frame = HarnessFrame(system="", tools=[], max_tokens=512)
    instruction = re.escape(demonstration.instruction.strip()) + r"(?!\w)"
    no_result = f"(?:(?!{re.escape(TOOL_RESPONSE)}).)*"
    return [
        {
            "match": instruction + no_result + f"(?:{re.escape(TOOL_RESPONSE)}{no_result}){{{k}}}$",
            "completion_tokens": turn.completion,
            "repeat": True,
        }
        for k, turn in enumerate(demonstration_turns(adapter, frame, demonstration))
    ]
