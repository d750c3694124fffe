"""One attempt as its owner reads it (`synth attempt show`): its conversation as its
harness saw it, call by call, and its grade.

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

from sqlalchemy import Engine, select

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.documents import AttemptDocument
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.schema import evidence_calls, run_events, runs
from synth_pipelines.control.table_outputs import TableMissingError, load_table
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.runtime.trial_records import restore_trial
from synth_pipelines.storage.objectstore import ObjectStore


class AttemptNotFoundError(LookupError):
    """No finished attempt of the owner's by that id (another owner's is the same)."""


class AmbiguousAttemptError(ValueError):
    """The prefix starts more than one of the owner's attempt ids."""


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
        raise AttemptNotFoundError(
            f"no finished attempt of yours has an id starting with {wanted!r}; "
            "`synth run events RUN` names each attempt as it finishes"
        )
    raise AmbiguousAttemptError(
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
) -> AttemptDocument:
    outcome = _newest(engine, store, "trials", batch, TrialOutcome, attempt_id)
    if outcome is None:
        raise AttemptNotFoundError(f"attempt {attempt_id} has no trial record in batch {batch} yet")
    assessment = _newest(engine, store, "assessments", batch, Assessment, attempt_id)
    evidence = read_attempt_evidence(engine, store, [attempt_id])
    rewards = assessment.rewards_json if assessment else outcome.rewards_json
    document = {
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
    return AttemptDocument.model_validate(document)
