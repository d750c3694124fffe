"""The built-in agent: a small tool-using coding agent that speaks Anthropic Messages.

It runs inside the sandbox as a script with only the standard library, so it must not
import the platform, and it starts in a tenth of a second: an attempt of a trivial task
costs little more than its sandbox (the `anthropic` SDK alone takes ~1.5 s to import).
Prompts are short so small models can follow them. Tools: `bash` and `write_file`. The
loop ends when the model answers without a tool call, or at the step limit; a reply cut
off at the token limit is continued.

Usage: agent.py --model M [--max-steps N] [--max-tokens T] [--system TEXT] [--answer-file F]
                [--trajectory F]
--answer-file writes the text of the last reply to F when the loop ends, for tasks that
grade an answer rather than files. --trajectory writes the run as Harbor's trajectory
(ATIF, what `harbor view` shows) to F; by default to `trajectory.json` beside the agent's
log, when its stdout is a file (the launcher redirects it into the log directory).
The instruction arrives on stdin (or as the last argument). ANTHROPIC_BASE_URL and
ANTHROPIC_AUTH_TOKEN (or ANTHROPIC_API_KEY) route it through the capture proxy with the
attempt's scoped token, as they route the `anthropic` SDK.
"""

import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Literal, TypedDict

SYSTEM = (
    "You are a coding agent in a Linux sandbox. The task's files are in the current "
    "directory. Use the tools to do the task, then reply with one short sentence."
)
TOOLS = [
    {
        "name": "bash",
        "description": "Run a bash command and get its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
    },
    {
        "name": "write_file",
        "description": "Write text to a file, replacing it.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file path."},
                "content": {"type": "string", "description": "The whole new content."},
            },
            "required": ["path", "content"],
        },
    },
]
OUTPUT_LIMIT = 4000
COMMAND_TIMEOUT_SEC = 60
CONTINUE = "Your reply was cut off at the token limit. Continue."
REQUEST_TIMEOUT_SEC = 600
RETRIES = 2
RETRIED_STATUSES = {408, 409, 429, 500, 502, 503, 504, 529}
"""What the `anthropic` SDK retries: timeouts, conflicts, rate limits, server errors."""


class Reply(TypedDict, total=False):
    """The parts of a Messages reply the loop reads. Its content blocks are JSON objects of
    several kinds (text, tool use), passed back to the model as they came."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: dict[str, int] | None


class UserStep(TypedDict):
    source: Literal["user"]
    at: str
    text: str


class ToolUse(TypedDict):
    id: str
    name: str
    input: dict[str, object]
    output: str
    failed: bool


class AgentStep(TypedDict):
    source: Literal["agent"]
    at: str
    text: str
    usage: dict[str, int]
    stop_reason: str | None
    tool_calls: list[ToolUse]


Step = UserStep | AgentStep
"""One entry of the conversation's record: a prompt, or a reply with the tools it used."""


class ModelCallError(Exception):
    """The model could not be reached, or refused the call in a way a retry does not cure."""


PLAIN_HTTP_HANDLERS = (
    urllib.request.ProxyHandler,
    urllib.request.UnknownHandler,
    urllib.request.HTTPHandler,
    urllib.request.HTTPDefaultErrorHandler,
    urllib.request.HTTPRedirectHandler,
    urllib.request.HTTPErrorProcessor,
)


@functools.cache
def opener(base: str) -> urllib.request.OpenerDirector:
    """`urlopen`'s opener, without its HTTPS handler for a plain http base (the proxy's
    route into the sandbox): that handler builds a TLS context when the opener is made,
    loading every CA certificate, which cost an attempt more CPU than the rest of the
    agent's start."""
    if base.startswith("https:"):
        return urllib.request.build_opener()
    plain = urllib.request.OpenerDirector()
    for handler in PLAIN_HTTP_HANDLERS:
        plain.add_handler(handler())
    return plain


def create_message(body: dict[str, object]) -> Reply:
    """POST /v1/messages, non-streaming, retried like the SDK retries (backoff 0.5 s, 1 s)."""
    base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")
    client = opener(base)
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    if os.environ.get("ANTHROPIC_API_KEY"):
        headers["x-api-key"] = os.environ["ANTHROPIC_API_KEY"]
    if os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        headers["authorization"] = f"Bearer {os.environ['ANTHROPIC_AUTH_TOKEN']}"
    data = json.dumps(body).encode()
    for attempt in range(RETRIES + 1):
        request = urllib.request.Request(
            f"{base}/v1/messages", data=data, headers=headers, method="POST"
        )
        try:
            with client.open(request, timeout=REQUEST_TIMEOUT_SEC) as response:
                reply: Reply = json.load(response)
                return reply
        except urllib.error.HTTPError as error:
            problem = f"HTTP {error.code}: {error.read().decode(errors='replace')[:2000]}"
            if error.code not in RETRIED_STATUSES:
                raise ModelCallError(problem) from None
        except (urllib.error.URLError, OSError) as error:
            problem = str(error)
        if attempt == RETRIES:
            raise ModelCallError(problem)
        time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def log(event: str, **data: object) -> None:
    print(json.dumps({"event": event, "time": time.time(), **data}), flush=True)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def beside_log() -> str | None:
    """`trajectory.json` in the directory of the log file the agent's stdout goes to."""
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    return (
        os.path.join(os.path.dirname(target), "trajectory.json") if os.path.isfile(target) else None
    )


ATIF_VERSION = "ATIF-v1.8"
"""The trajectory format Harbor 0.26 writes and `harbor view` reads."""


def present(**fields: object) -> dict[str, object]:
    """The fields that have a value: Harbor's trajectory leaves the others out."""
    return {name: value for name, value in fields.items() if value is not None}


def write_trajectory(path: str, options: argparse.Namespace, steps: list[Step]) -> None:
    """The loop's record as an ATIF trajectory, in the shape Harbor's own models write
    (tests validate it with them); built with the standard library, as importing Harbor's
    models in every sandbox would cost each attempt a sixth of a CPU second."""
    built = [present(step_id=1, source="system", message=options.system)]
    for step in steps:
        if step["source"] == "user":
            built.append(
                present(
                    step_id=len(built) + 1,
                    timestamp=step["at"],
                    source="user",
                    message=step["text"],
                )
            )
            continue
        calls = step["tool_calls"]
        usage = step["usage"]
        built.append(
            present(
                step_id=len(built) + 1,
                timestamp=step["at"],
                source="agent",
                model_name=options.model,
                message=step["text"],
                tool_calls=[
                    {"tool_call_id": c["id"], "function_name": c["name"], "arguments": c["input"]}
                    for c in calls
                ]
                or None,
                observation={
                    "results": [
                        {
                            "source_call_id": c["id"],
                            "content": c["output"],
                            "extra": {"is_error": c["failed"]},
                        }
                        for c in calls
                    ]
                }
                if calls
                else None,
                metrics=present(
                    prompt_tokens=usage.get("input_tokens"),
                    completion_tokens=usage.get("output_tokens"),
                ),
                extra={"stop_reason": step["stop_reason"]},
            )
        )
    replies = [step for step in steps if step["source"] == "agent"]
    trajectory = {
        "schema_version": ATIF_VERSION,
        "agent": {
            "name": "synth-builtin",
            "version": "1",
            "model_name": options.model,
            "tool_definitions": TOOLS,
        },
        "steps": built,
        "final_metrics": {
            "total_prompt_tokens": sum(s["usage"].get("input_tokens") or 0 for s in replies),
            "total_completion_tokens": sum(s["usage"].get("output_tokens") or 0 for s in replies),
            "total_steps": len(built),
        },
    }
    with open(path, "w") as handle:
        json.dump(trajectory, handle, indent=2)


def run_bash(command: str) -> tuple[str, bool]:
    try:
        done = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SEC,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return f"command timed out after {COMMAND_TIMEOUT_SEC} s", True
    output = (done.stdout + done.stderr)[-OUTPUT_LIMIT:] or "(no output)"
    return f"exit code {done.returncode}\n{output}", done.returncode != 0


def write_file(path: str, content: str) -> tuple[str, bool]:
    try:
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        with open(path, "w") as handle:
            handle.write(content)
    except OSError as error:
        return f"could not write {path}: {error.strerror}", True
    return f"wrote {len(content)} characters to {path}", False


def use_tool(name: str, arguments: object) -> tuple[str, bool]:
    """Run one tool call; `arguments` is whatever JSON the model sent."""
    if name not in ("bash", "write_file"):
        return f"there is no tool named {name!r}; use bash or write_file", True
    if not isinstance(arguments, dict):
        return f"tool {name} takes an object of arguments", True
    try:
        if name == "bash":
            return run_bash(str(arguments["command"]))
        return write_file(str(arguments["path"]), str(arguments["content"]))
    except KeyError as missing:
        return f"tool {name} needs the argument {missing}", True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--system", default=SYSTEM)
    parser.add_argument("--answer-file")
    parser.add_argument("--trajectory", default=beside_log())
    parser.add_argument("instruction", nargs="?")
    options = parser.parse_args()
    steps: list[Step] = []
    status, answer = run(options, steps)
    if options.answer_file:
        with open(options.answer_file, "w") as handle:
            handle.write(answer)
    if options.trajectory and steps:
        write_trajectory(options.trajectory, options, steps)
    return status


def run(options: argparse.Namespace, steps: list[Step]) -> tuple[int, str]:
    """The agent loop: its exit status and the text of its last reply. `steps` receives
    the conversation (prompts, replies with their usage, tool calls with their outputs)."""
    instruction = options.instruction if options.instruction is not None else sys.stdin.read()
    limit = int(os.environ.get("SYNTH_MAX_OUTPUT_TOKENS", options.max_tokens))
    messages: list[dict[str, object]] = [{"role": "user", "content": instruction}]
    steps.append({"source": "user", "at": now(), "text": instruction})
    answer = ""
    for step in range(1, options.max_steps + 1):
        try:
            reply = create_message(
                {
                    "model": options.model,
                    "max_tokens": min(options.max_tokens, limit),
                    "system": options.system,
                    "tools": TOOLS,
                    "thinking": {"type": "disabled"},
                    "messages": messages,
                }
            )
        except ModelCallError as error:
            log("model_error", step=step, error=str(error))
            return 1, answer
        content = [
            {key: value for key, value in block.items() if value is not None}
            for block in reply.get("content", [])
        ]
        log("reply", step=step, stop_reason=reply.get("stop_reason"), content=content)
        answer = "".join(block.get("text", "") for block in content if block.get("type") == "text")
        messages.append({"role": "assistant", "content": content or [{"type": "text", "text": ""}]})
        calls = [block for block in content if block.get("type") == "tool_use"]
        used: list[ToolUse] = []
        steps.append(
            {
                "source": "agent",
                "at": now(),
                "text": answer,
                "usage": reply.get("usage") or {},
                "stop_reason": reply.get("stop_reason"),
                "tool_calls": used,
            }
        )
        if calls:
            results: list[dict[str, object]] = []
            for call in calls:
                arguments = call.get("input") or {}
                output, failed = use_tool(call.get("name", ""), arguments)
                log(
                    "tool",
                    step=step,
                    name=call.get("name"),
                    input=arguments,
                    output=output,
                    failed=failed,
                )
                used.append(
                    {
                        "id": call.get("id") or f"call-{step}-{len(used)}",
                        "name": call.get("name", ""),
                        "input": arguments if isinstance(arguments, dict) else {"value": arguments},
                        "output": output,
                        "failed": failed,
                    }
                )
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": call.get("id"),
                        "content": output,
                        "is_error": failed,
                    }
                )
            messages.append({"role": "user", "content": results})
        elif reply.get("stop_reason") == "max_tokens":
            messages.append({"role": "user", "content": CONTINUE})
            steps.append({"source": "user", "at": now(), "text": CONTINUE})
        else:
            log("done", steps=step)
            return 0, answer
    log("step_limit", steps=options.max_steps)
    return 0, answer


if __name__ == "__main__":
    sys.exit(main())
