"""Which attempts and groups can teach the model, and their group-relative advantages.

Eligibility is settled before advantages: an attempt without a valid reward or without
trustworthy evidence is excluded with its reason, and only then are the remaining rewards
centered within the group (tinker-cookbook's `compute_advantages`). A valid zero reward
is a learning outcome; missing or invalid evidence is an exclusion.
"""

from __future__ import annotations

import math

import torch

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.exclusion import Exclusion, ExclusionReason
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.contracts.plan import Eligibility
from synth_pipelines.contracts.trial import TrialOutcome


def actor_calls(calls: list[Interaction], trial_id: str | None = None) -> list[Interaction]:
    """The actor's own calls (never a judge's), from the execution that produced the
    outcome being learned from."""
    return [
        call
        for call in calls
        if call.role == "actor" and (trial_id is None or call.trial_id == trial_id)
    ]


INFERENCE_ONLY_SAMPLERS = ("openai_chat:", "anthropic:")
"""How the proxy names the route of a call answered by an inference-only route (an external
chat-completions server or an upstream Anthropic endpoint): text evidence, request and
response JSON with no token ids or logprobs."""


def text_evidence_reason(call: Interaction) -> Exclusion | None:
    """Why a call cannot be learned from, if it is text evidence."""
    if not call.sampler.startswith(INFERENCE_ONLY_SAMPLERS):
        return None
    return Exclusion(
        ExclusionReason.TEXT_EVIDENCE,
        f"call {call.call_id} was answered by the inference-only route {call.sampler}: "
        "text evidence, with no token ids or logprobs to learn from",
    )


def attempt_exclusion(
    assessment: Assessment | None,
    calls: list[Interaction],
    evidence_problem: str | None,
    sampler: str,
) -> Exclusion | None:
    if assessment is None or not assessment.valid or assessment.reward is None:
        reason = assessment.reason if assessment is not None else "not assessed"
        return Exclusion(ExclusionReason.NO_VALID_REWARD, f"no valid reward ({reason})")
    if not math.isfinite(assessment.reward):
        return Exclusion(
            ExclusionReason.REWARD_NOT_FINITE, f"reward {assessment.reward} is not finite"
        )
    if evidence_problem is not None:
        return Exclusion(
            ExclusionReason.EVIDENCE_UNUSABLE, f"evidence unusable: {evidence_problem}"
        )
    if not calls:
        return Exclusion(ExclusionReason.NO_CALLS, "no captured model calls")
    for call in calls:
        text_only = text_evidence_reason(call)
        if text_only is not None:
            return text_only
        if not call.aligned:
            return Exclusion(
                ExclusionReason.UNALIGNED_LOGPROBS,
                f"call {call.call_id}: {len(call.completion_tokens)} sampled tokens but "
                f"{len(call.logprobs)} logprobs",
            )
        if not all(math.isfinite(lp) for lp in call.logprobs):
            return Exclusion(
                ExclusionReason.LOGPROB_NOT_FINITE,
                f"call {call.call_id}: a sampler logprob is not finite",
            )
        if not call.prompt_tokens:
            return Exclusion(ExclusionReason.EMPTY_PROMPT, f"call {call.call_id}: empty prompt")
        if call.sampler != sampler:
            return Exclusion(
                ExclusionReason.OTHER_POLICY,
                f"call {call.call_id} was sampled by {call.sampler}, "
                f"not this batch's policy {sampler}",
            )
    return None


def group_exclusion(rewards: list[float], eligibility: Eligibility) -> Exclusion | None:
    if len(rewards) < eligibility.min_qualified_attempts:
        return Exclusion(
            ExclusionReason.TOO_FEW_QUALIFIED,
            f"{len(rewards)} qualified attempt(s), fewer than the "
            f"{eligibility.min_qualified_attempts} the plan requires",
        )
    if eligibility.drop_constant_reward_groups and len(set(rewards)) == 1:
        return Exclusion(
            ExclusionReason.CONSTANT_REWARD,
            f"no reward signal: all {len(rewards)} qualified attempts scored {rewards[0]:g}",
        )
    return None


def group_advantages(rewards: list[float]) -> list[float]:
    """Each reward centered within its group: tinker-cookbook's `compute_advantages`,
    which takes trajectory groups, computed from the rewards alone (the same float32
    arithmetic)."""
    rewards_G = torch.tensor(rewards)
    advantages_G = rewards_G - rewards_G.mean()
    return [float(value) for value in advantages_G]


def qualify_group(
    outcomes: list[TrialOutcome],
    assessments: dict[str, Assessment],
    calls: dict[str, list[Interaction]],
    problems: dict[str, str],
    eligibility: Eligibility,
    sampler: str,
) -> list[QualifiedAttempt]:
    standing = []
    for outcome in outcomes:
        assessment = assessments.get(outcome.attempt_id)
        mine = actor_calls(calls.get(outcome.attempt_id, []), outcome.trial_id)
        exclusion = attempt_exclusion(assessment, mine, problems.get(outcome.attempt_id), sampler)
        standing.append((outcome, assessment, mine, exclusion))
    # `attempt_exclusion` passes only attempts with a reward; repeated for the type checker.
    qualified = [
        (o, a.reward)
        for o, a, _, excluded in standing
        if excluded is None and a is not None and a.reward is not None
    ]
    rewards = [reward for _, reward in qualified]
    why_not = group_exclusion(rewards, eligibility)
    advantages: dict[str, float] = {}
    if why_not is None:
        advantages = {
            o.attempt_id: value
            for (o, _), value in zip(qualified, group_advantages(rewards), strict=True)
        }
    return [
        QualifiedAttempt(
            run_id=outcome.run_id,
            batch=outcome.batch,
            attempt_id=outcome.attempt_id,
            trial_id=outcome.trial_id,
            group_index=outcome.group_index,
            task_name=outcome.task_name,
            reward=assessment.reward if assessment is not None else None,
            calls=len(mine),
            qualified=exclusion is None,
            exclusion=exclusion.detail if exclusion else None,
            group_qualified=why_not is None,
            group_exclusion=why_not.detail if why_not else None,
            advantage=advantages.get(outcome.attempt_id),
            exclusion_reason=exclusion.reason if exclusion else None,
            group_exclusion_reason=why_not.reason if why_not else None,
        )
        for outcome, assessment, mine, exclusion in standing
    ]
