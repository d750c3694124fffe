"""The built-in agent: a small tool-using coding agent that speaks Anthropic Messages.

It runs inside the sandbox as a script (only the standard library and the `anthropic`
SDK), so it must not import the platform. Prompts are short so small models can follow
them. Tools: `bash` and `write_file`. The loop ends when the model answers without a tool
call, or at the step limit; a reply cut off at the token limit is continued.

Usage: agent.py --model M [--max-steps N] [--max-tokens T] [--system TEXT]
The instruction arrives on stdin (or as the last argument). ANTHROPIC_BASE_URL and
ANTHROPIC_AUTH_TOKEN route it through the capture proxy with the attempt's scoped token.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import anthropic

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


def log(event: str, **data) -> None:
    print(json.dumps({"event": event, "time": time.time(), **data}), flush=True)


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


def use_tool(name: str, arguments: dict) -> tuple[str, bool]:
    try:
        if name == "bash":
            return run_bash(str(arguments["command"]))
        if name == "write_file":
            return write_file(str(arguments["path"]), str(arguments["content"]))
    except KeyError as missing:
        return f"tool {name} needs the argument {missing}", True
    return f"there is no tool named {name!r}; use bash or write_file", True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--system", default=SYSTEM)
    parser.add_argument("instruction", nargs="?")
    options = parser.parse_args()
    instruction = options.instruction if options.instruction is not None else sys.stdin.read()
    limit = int(os.environ.get("SYNTH_MAX_OUTPUT_TOKENS", options.max_tokens))
    client = anthropic.Anthropic(max_retries=2, timeout=600)
    messages: list[dict] = [{"role": "user", "content": instruction}]
    for step in range(1, options.max_steps + 1):
        reply = client.messages.create(
            model=options.model,
            max_tokens=min(options.max_tokens, limit),
            system=options.system,
            tools=TOOLS,
            thinking={"type": "disabled"},
            messages=messages,
        )
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        log("reply", step=step, stop_reason=reply.stop_reason, content=content)
        messages.append({"role": "assistant", "content": content or [{"type": "text", "text": ""}]})
        calls = [block for block in reply.content if block.type == "tool_use"]
        if calls:
            results = []
            for call in calls:
                output, failed = use_tool(call.name, call.input)
                log("tool", step=step, name=call.name, input=call.input, failed=failed)
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": output,
                        "is_error": failed,
                    }
                )
            messages.append({"role": "user", "content": results})
        elif reply.stop_reason == "max_tokens":
            messages.append({"role": "user", "content": CONTINUE})
        else:
            log("done", steps=step)
            return 0
    log("step_limit", steps=options.max_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
