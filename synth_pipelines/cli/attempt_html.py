"""One attempt's conversation as a single static HTML page: no server, no external assets,
every piece of captured content escaped."""

from __future__ import annotations

import json
from html import escape
from typing import Any

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #222; }
h1 { font-size: 1.3rem; } .meta { color: #666; font-size: 12px; margin: .2rem 0; }
.turn { border-left: 4px solid #ccc; padding: .3rem .8rem; margin: .6rem 0; }
.user { border-color: #4a7fd4; } .assistant { border-color: #3a9a5b; }
.tool { border-color: #c98b1c; background: #fdf8ee; } .system { border-color: #999; }
.error { background: #fdeeee; }
pre { white-space: pre-wrap; word-break: break-word; margin: .2rem 0; }
"""


def _pre(text: str) -> str:
    return f"<pre>{escape(text)}</pre>"


def _message(role: str, blocks: list[dict[str, Any]]) -> str:
    parts = []
    for block in blocks:
        if block.get("type") == "text" and block.get("text"):
            parts.append(_pre(block["text"]))
        elif block.get("type") == "tool_result":
            parts.append(
                f'<div class="meta">result of {escape(str(block.get("tool_use_id")))}</div>'
            )
    if not parts:
        return ""
    return f'<div class="turn {escape(role)}"><b>{escape(role)}</b>{"".join(parts)}</div>'


def _call(call: dict[str, Any], tools: dict[str, dict[str, Any]]) -> str:
    html = [_message(m["role"], m["content"]) for m in call["input"]]
    html.append(
        f'<div class="meta">model call {call["call_index"]} ({escape(call["agent_id"])}, '
        f"sampler {escape(call['sampler'])}): {call['prompt_tokens']} prompt + "
        f"{call['completion_tokens']} completion tokens, {escape(call['stop_reason'])}; "
        f"evidence {escape(str(call['chunk_key']))}</div>"
    )
    for block in call["output"]:
        if block.get("type") == "text" and block.get("text"):
            html.append(_message("assistant", [block]))
        elif block.get("type") == "thinking" and block.get("thinking"):
            html.append(
                f'<div class="turn assistant"><i>thinking</i>{_pre(block["thinking"])}</div>'
            )
        elif block.get("type") == "tool_use":
            tool = tools[block["id"]]
            failed = " error" if tool["is_error"] else ""
            html.append(
                f'<div class="turn tool{failed}"><b>{escape(tool["name"])}</b>'
                f"{_pre(json.dumps(tool['input'], indent=2))}"
                f'<div class="meta">output</div>{_pre(tool["output"] or "(no result)")}</div>'
            )
    return "".join(html)


def attempt_html(document: dict[str, Any]) -> str:
    """The `attempt show` document as a page a browser opens from disk."""
    tools = {tool["tool_use_id"]: tool for tool in document["tool_calls"]}
    body = [
        f"<h1>{escape(document['attempt_id'])}</h1>",
        f'<div class="meta">task {escape(document["task_name"])}, trial '
        f"{escape(document['trial_name'])}, {escape(document['status'])}</div>",
    ]
    if document["system"]:
        body.append(f'<div class="turn system"><b>system</b>{_pre(document["system"])}</div>')
    body.extend(_call(call, tools) for call in document["calls"])
    body.append(
        f"<h2>Grade</h2><div>reward {escape(str(document['reward']))} "
        f"{escape(json.dumps(document['rewards']))}</div>"
    )
    for title, key in (("Verifier output", "verifier_output"), ("Rationale", "rationale")):
        if document[key]:
            body.append(f"<h3>{title}</h3>{_pre(document[key])}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(document['attempt_id'])}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
