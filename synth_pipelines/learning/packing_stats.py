"""How a batch's packed attempts split into datums, and why each datum after an attempt's
first one started.

The walk reads the calls `learning/datums.py` packs and applies `trajectory_to_data`'s
rule to them: a call continues the datum while its prompt starts with every token the
datum holds (the previous prompt and its sampled completion), and starts a new one
otherwise. Where the rule breaks, the place the prompt parts from the held tokens says
who changed the context, which the datums alone no longer show.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import NewDatumReason, QualifiedAttempt
from synth_pipelines.learning.datums import packed_attempts
from synth_pipelines.learning.qualification import actor_calls
from synth_pipelines.learning.trajectories import agent_calls


def new_datum_reason(
    held: list[int], completion_length: int, prompt: list[int]
) -> NewDatumReason | None:
    """Why `prompt` starts a new datum after one holding `held`, whose last
    `completion_length` tokens were sampled; None when it continues that datum."""
    if prompt[: len(held)] == held:
        return None
    if len(prompt) < len(held) and held[: len(prompt)] == prompt:
        return NewDatumReason.PROMPT_SHORTER
    parted = next(
        i for i, (kept, sent) in enumerate(zip(held, prompt, strict=False)) if kept != sent
    )
    if parted < len(held) - completion_length:
        return NewDatumReason.PROMPT_REWROTE_HISTORY
    return NewDatumReason.GENERATION_NOT_ECHOED


def agent_reasons(calls: list[Interaction]) -> list[NewDatumReason]:
    """Why each of one agent's datums after its first started, in call order."""
    reasons = []
    held: list[int] = []
    completion_length = 0
    for call in calls:
        reason = new_datum_reason(held, completion_length, call.prompt_tokens)
        if reason is not None:
            reasons.append(reason)
        # Continued or new, the datum now holds exactly this prompt and its completion.
        held = [*call.prompt_tokens, *call.completion_tokens]
        completion_length = len(call.completion_tokens)
    return reasons


@dataclass(frozen=True)
class AttemptPacking:
    """One packed attempt: its actor calls, its datums, why each datum after its first."""

    calls: int
    datums: int
    reasons: Counter[NewDatumReason]


def attempt_packing(standing: QualifiedAttempt, calls: list[Interaction]) -> AttemptPacking:
    """How `attempt_datums(standing, calls)` splits the attempt's calls into datums."""
    agents = list(agent_calls(actor_calls(calls, standing.trial_id)).values())
    reasons: Counter[NewDatumReason] = Counter()
    for number, agent in enumerate(agents):
        # The main agent comes first; every later agent is a delegated one, whose first
        # datum is new for its own context. (An attempt without main-agent calls begins
        # with its first delegated agent's datum, which is then the attempt's first.)
        if number > 0:
            reasons[NewDatumReason.DELEGATED_AGENT] += 1
        reasons.update(agent_reasons(agent))
    return AttemptPacking(
        calls=sum(len(agent) for agent in agents),
        # Every datum after the attempt's first has exactly one reason.
        datums=1 + sum(reasons.values()) if agents else 0,
        reasons=reasons,
    )


def group_packing(
    standings: list[QualifiedAttempt], calls: dict[str, list[Interaction]]
) -> list[AttemptPacking]:
    """How `group_datums(standings, calls)` packs each attempt it packs."""
    return [
        attempt_packing(standing, calls[standing.attempt_id])
        for standing in packed_attempts(standings)
    ]


@dataclass(frozen=True)
class BatchPacking:
    """Per-batch packing numbers, as `synth run show` shows them; the means and maxima
    are None when no attempt of the batch was packed."""

    calls_per_attempt_mean: float | None
    calls_per_attempt_max: int | None
    datums_per_attempt_mean: float | None
    datums_per_attempt_max: int | None
    new_datum_reasons: dict[str, int]


def batch_packing(attempts: list[AttemptPacking]) -> BatchPacking:
    calls = [attempt.calls for attempt in attempts]
    datums = [attempt.datums for attempt in attempts]
    reasons = sum((attempt.reasons for attempt in attempts), Counter())
    return BatchPacking(
        calls_per_attempt_mean=sum(calls) / len(calls) if calls else None,
        calls_per_attempt_max=max(calls, default=None),
        datums_per_attempt_mean=sum(datums) / len(datums) if datums else None,
        datums_per_attempt_max=max(datums, default=None),
        new_datum_reasons={
            reason.value: reasons[reason] for reason in NewDatumReason if reasons[reason]
        },
    )
