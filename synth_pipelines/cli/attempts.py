"""`synth attempt show`: one attempt's conversation as its harness saw it, call by call.

The conversation comes from the captured evidence, not from the harness's own log: each
model call's request and response as the proxy served them, with the sampler's own token
counts, the evidence chunk that holds them, and each tool call paired with the result the
harness sent back. The verifier's reward and output come from the assessment and the
archived trial.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import typer
from sqlalchemy import Engine, select

from synth_pipelines.cli.output import (
    JSON_OPTION,
    UserError,
    console,
    emit,
    inert,
    user_errors,
)
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import evidence_calls, run_events, runs
from synth_pipelines.control.table_outputs import TableMissingError, load_table
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.runtime.trial_records import restore_trial
from synth_pipelines.storage.objectstore import ObjectStore, configured_object_store

attempt_app = typer.Typer(
    help="Read one attempt: its conversation and its grade.", no_args_is_help=True
)

VERIFIER_OUTPUT_CHARS = 8000


def resolve_attempt(engine: Engine, owner: str, wanted: str) -> tuple[str, str]:
    """(attempt id, batch) of the one finished attempt of the owner's runs whose id starts
    with `wanted`; another owner's attempts are neither shown nor counted."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(run_events.c.data_json)
            .join(runs, runs.c.run_id == run_events.c.run_id)
            .where(
                runs.c.owner == owner,
                run_events.c.kind == "attempt.finished",
                run_events.c.data_json.contains(wanted),
            )
        ).all()
    found = {}
    for row in rows:
        data = json.loads(row.data_json)
        if data["attempt_id"].startswith(wanted):
            found[data["attempt_id"]] = data["batch"]
    if wanted in found:
        return wanted, found[wanted]
    if len(found) == 1:
        return next(iter(found.items()))
    if not found:
        raise UserError(
            f"no finished attempt has an id starting with {wanted!r}; `synth run events RUN` "
            "names each attempt as it finishes"
        )
    raise UserError(
        f"{wanted!r} starts {len(found)} attempt ids ({', '.join(sorted(found)[:3])}, ...); "
        "give more of the id"
    )


def _newest[Row: (TrialOutcome, Assessment)](
    engine: Engine, store: ObjectStore, asset: str, batch: str, row_type: type[Row], attempt: str
) -> Row | None:
    try:
        rows = row_type.from_table(load_table(engine, store, asset, batch))
    except TableMissingError:
        return None
    return next((row for row in rows if row.attempt_id == attempt), None)


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as Anthropic blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _text(content: Any) -> str:
    return "".join(block.get("text", "") for block in _blocks(content))


def _call_chunks(engine: Engine, attempt_id: str) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(evidence_calls.c.call_id, evidence_calls.c.chunk_key).where(
                evidence_calls.c.attempt_id == attempt_id
            )
        ).all()
    return {row.call_id: row.chunk_key for row in rows}


def conversation(calls: list[Interaction], chunks: dict[str, str]) -> dict[str, Any]:
    """Per call, the messages new since the agent's previous call and the reply; every tool
    call with the result the harness answered it with."""
    seen: dict[str, int] = {}
    system = None
    documents: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    for call in calls:
        request, response = json.loads(call.request_json), json.loads(call.response_json)
        messages = request.get("messages", [])
        if system is None and request.get("system"):
            system = _text(request["system"])
        new = messages[seen.get(call.agent_id, 0) :]
        seen[call.agent_id] = len(messages) + 1
        for message in new:
            for block in _blocks(message.get("content")):
                if block.get("type") == "tool_result" and block.get("tool_use_id") in tools:
                    tools[block["tool_use_id"]].update(
                        output=_text(block.get("content")), is_error=bool(block.get("is_error"))
                    )
        output = _blocks(response.get("content"))
        for block in output:
            if block.get("type") == "tool_use":
                tools[block["id"]] = {
                    "tool_use_id": block["id"],
                    "model_call_id": call.call_id,
                    "name": block.get("name", ""),
                    "input": block.get("input") or {},
                    "output": None,
                    "is_error": None,
                }
        documents.append(
            {
                "call_id": call.call_id,
                "call_index": call.call_index,
                "agent_id": call.agent_id,
                "model": call.model,
                "sampler": call.sampler,
                "chunk_key": chunks.get(call.call_id),
                "prompt_tokens": len(call.prompt_tokens),
                "completion_tokens": len(call.completion_tokens),
                "completion_logprob": sum(call.logprobs),
                "stop_reason": call.stop_reason,
                "input": [
                    {"role": m.get("role", "user"), "content": _blocks(m.get("content"))}
                    for m in new
                ],
                "output": output,
            }
        )
    return {"system": system, "calls": documents, "tool_calls": list(tools.values())}


def _verifier_output(store: ObjectStore, outcome: TrialOutcome) -> str | None:
    with tempfile.TemporaryDirectory() as scratch:
        trial = restore_trial(store, outcome.trial_key, outcome.trial_sha256, Path(scratch))
        stdout = trial / "verifier" / "test-stdout.txt"
        return (
            stdout.read_text(errors="replace")[-VERIFIER_OUTPUT_CHARS:]
            if stdout.is_file()
            else None
        )


def attempt_document(
    engine: Engine, store: ObjectStore, attempt_id: str, batch: str
) -> dict[str, Any]:
    outcome = _newest(engine, store, "trials", batch, TrialOutcome, attempt_id)
    if outcome is None:
        raise UserError(f"attempt {attempt_id} has no trial record in batch {batch} yet")
    assessment = _newest(engine, store, "assessments", batch, Assessment, attempt_id)
    evidence = read_attempt_evidence(engine, store, [attempt_id])
    rewards = assessment.rewards_json if assessment else outcome.rewards_json
    return {
        "attempt_id": attempt_id,
        "run_id": outcome.run_id,
        "batch": batch,
        "task_name": outcome.task_name,
        "trial_name": outcome.trial_name,
        "status": outcome.status,
        **conversation(evidence.calls.get(attempt_id, []), _call_chunks(engine, attempt_id)),
        "evidence_problem": evidence.problems.get(attempt_id),
        "reward": assessment.reward if assessment else None,
        "rewards": json.loads(rewards) if rewards else None,
        "assessor": assessment.assessor if assessment else None,
        "rationale": assessment.rationale if assessment else outcome.rationale,
        "verifier_output": _verifier_output(store, outcome),
        "exception": outcome.exception_message,
    }


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
    config: Settings = ctx.obj
    engine = control_engine(config)
    with user_errors():
        attempt_id, batch = resolve_attempt(engine, config.owner, attempt)
        if html is not None and not html.parent.is_dir():
            raise UserError(f"cannot write {html}: its directory does not exist")
    store = configured_object_store(config)
    with user_errors():
        document = attempt_document(engine, store, attempt_id, batch)
    if html is not None:
        from synth_pipelines.cli.attempt_html import attempt_html

        html.write_text(attempt_html(document))
    emit("attempt show", document, as_json, lambda: _render(document))
