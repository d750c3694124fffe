"""`synth attempt show`: one attempt's conversation as its harness saw it, call by call,
and its grade, as the gateway answers it for the key's owner (`runtime/attempt_view.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer

from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import (
    JSON_OPTION,
    UserError,
    console,
    emit,
    inert,
    user_errors,
)

attempt_app = typer.Typer(
    help="Read one attempt: its conversation and its grade.", no_args_is_help=True
)


def _render(document: dict[str, Any]) -> None:
    console.print(
        f"[bold]{document['attempt_id']}[/] task {inert(document['task_name'])}, "
        f"{document['status']}; "
        f"reward {document['reward']}",
        soft_wrap=True,
    )
    if document["system"]:
        console.print(f"[dim]system:[/] {inert(document['system'])}")
    results = {tool["tool_use_id"]: tool for tool in document["tool_calls"]}
    for call in document["calls"]:
        for message in call["input"]:
            for block in message["content"]:
                if block.get("type") == "text":
                    console.print(f"[cyan]{inert(message['role'])}:[/] {inert(block['text'])}")
        console.print(
            f"[dim]model call {call['call_index']} ({inert(call['agent_id'])}): "
            f"{call['prompt_tokens']} prompt + {call['completion_tokens']} completion tokens, "
            f"{call['stop_reason']}; evidence {call['chunk_key']}[/]",
            soft_wrap=True,
        )
        for block in call["output"]:
            if block.get("type") == "text" and block.get("text"):
                console.print(f"[green]assistant:[/] {inert(block['text'])}")
            elif block.get("type") == "tool_use":
                tool = results[block["id"]]
                console.print(
                    f"[yellow]{inert(tool['name'])}[/] {inert(json.dumps(tool['input']))}"
                )
                console.print(inert(tool["output"] or "(no result)"))
    if document["verifier_output"]:
        console.print(f"[bold]verifier output[/]\n{inert(document['verifier_output'])}")
    if document["rationale"]:
        console.print(f"[bold]rationale[/]\n{inert(document['rationale'])}")


@attempt_app.command("show")
def show(
    ctx: typer.Context,
    attempt: str = typer.Argument(
        ..., metavar="ATTEMPT", help="The attempt id (`synth run events`), or a unique prefix."
    ),
    as_json: bool = JSON_OPTION,
    html: Path | None = typer.Option(
        None, "--html", help="Also write the conversation as one static HTML file here."
    ),
) -> None:
    """One attempt's messages, tool calls and results, per model call its token counts and
    evidence chunk, then the verifier's reward and output."""
    with user_errors():
        if html is not None and not html.parent.is_dir():
            raise UserError(f"cannot write {html}: its directory does not exist")
        document = GatewayClient(ctx.obj).request("GET", f"/v1/attempts/{quote(attempt, safe='')}")
    if html is not None:
        from synth_pipelines.cli.attempt_html import attempt_html

        html.write_text(attempt_html(document))
    emit("attempt show", document, as_json, lambda: _render(document))
