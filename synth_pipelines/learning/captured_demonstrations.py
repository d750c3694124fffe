"""Demonstrations as a native harness sent them: the captured calls of a run against a teacher.

A native harness's request frame (its system prompt, tool definitions, what it adds between
calls) is only known by running it. So the harness is run on the training tasks with its
model bound to a teacher that answers with each task's demonstration (`synth model teach`),
and the capture proxy records every call as usual. Each captured call is then one worked
example: exactly the prompt tokens the proxy rendered from what the harness sent, followed
by exactly the teacher's completion tokens. Nothing is rendered again here.

Calls are packed as learning packs them: a call whose prompt starts with everything the
example holds (the previous prompt and completion) continues it, its new prompt tokens
weighted zero and its completion one; any other call starts a new example. A Claude Code
attempt's two calls are then one example, which costs the warm start half the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.control.runs import RunNotFoundError, get_run
from synth_pipelines.evidence.reader import read_attempt_evidence, run_attempts
from synth_pipelines.learning.demonstrations import DemonstrationError
from synth_pipelines.learning.trajectories import agent_calls
from synth_pipelines.rendering.model_registry import ModelRegistry
from synth_pipelines.storage.objectstore import ObjectStore

LEARNED_STOPS = ("tool_use", "end_turn")
"""Calls whose completion the teacher ended; a cut-off or unparsed answer is not an example."""


def captured_run(engine: Engine, run_id: str, actor_digest: str, owner: str) -> RunRecord:
    """The run whose captures a warm start learns from: finished, the owner's, and run with
    the very profile the warm start trains (so the frame learned is the frame used)."""
    try:
        record = get_run(engine, run_id)
    except RunNotFoundError as error:
        raise DemonstrationError(f"captured_run: {error}") from None
    if record.owner != owner:
        raise DemonstrationError(f"captured_run {run_id} belongs to another owner")
    if record.status != "succeeded":
        raise DemonstrationError(
            f"captured_run {run_id} is {record.status}; learn from a run that succeeded"
        )
    if record.spec.actor.digest != actor_digest:
        captured = record.spec.actor
        raise DemonstrationError(
            f"captured_run {run_id} ran actor profile {captured.name}@{captured.version} "
            f"({captured.digest[:19]}), not this warm start's; capture with the same profile"
        )
    return record


@dataclass(frozen=True)
class CapturedExample:
    """Captured tokens in order, and per token whether it is the teacher's (weight 1)."""

    tokens: list[int]
    weights: list[float]


def _packed(calls: list[Interaction]) -> list[CapturedExample]:
    examples: list[CapturedExample] = []
    for call in calls:
        held = examples[-1].tokens if examples else None
        if held is None or call.prompt_tokens[: len(held)] != held:
            examples.append(CapturedExample([], []))
            held = []
        observed = call.prompt_tokens[len(held) :]
        examples[-1].tokens.extend([*observed, *call.completion_tokens])
        examples[-1].weights.extend([0.0] * len(observed) + [1.0] * len(call.completion_tokens))
    return examples


def captured_examples(
    engine: Engine, store: ObjectStore, run_id: str, registry: ModelRegistry, base_model: str
) -> list[list[CapturedExample]]:
    """Per attempt of the run (in attempt order), its actor calls packed into examples."""
    family = registry.get(base_model).family
    attempts = run_attempts(engine, run_id)
    evidence = read_attempt_evidence(engine, store, attempts)
    if evidence.problems:
        attempt, problem = next(iter(evidence.problems.items()))
        raise DemonstrationError(f"captured_run {run_id}: attempt {attempt}: {problem}")
    per_attempt = []
    for attempt in attempts:
        learned = [
            call
            for call in evidence.calls[attempt]
            if call.role == "actor" and not call.parse_error and call.stop_reason in LEARNED_STOPS
        ]
        for call in learned:
            if registry.get(call.model).family != family:
                raise DemonstrationError(
                    f"captured_run {run_id}: call {call.call_id} was rendered for "
                    f"{call.model} ({registry.get(call.model).family}), not in {base_model}'s "
                    f"format ({family})"
                )
        examples = [
            example for agent in agent_calls(learned).values() for example in _packed(agent)
        ]
        if examples:
            per_attempt.append(examples)
    if not per_attempt:
        raise DemonstrationError(f"captured_run {run_id} has no completed actor call to learn from")
    return per_attempt
