"""Assessments from a trial's verifier: the task's own tests, or a judge profile."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.trial import TrialOutcome

TASK_VERIFIER = "task-verifier"


@dataclass(frozen=True)
class Assessor:
    """Who assessed: the task's verifier (identified by the task's digest) or a judge
    (identified by its profile's digest)."""

    name: str
    digest: str | None

    @classmethod
    def of(cls, judge: PinnedProfile | None) -> Assessor:
        if judge is None:
            return cls(TASK_VERIFIER, None)
        return cls(f"judge:{judge.name}@{judge.version}", judge.digest)


def _reward(rewards: dict[str, float]) -> float | None:
    """The headline reward: Harbor's `reward` key, or the only key there is."""
    if "reward" in rewards:
        return float(rewards["reward"])
    if len(rewards) == 1:
        return float(next(iter(rewards.values())))
    return None


def assessment(
    outcome: TrialOutcome,
    assessor: Assessor,
    *,
    assessment_id: str,
    rewards_json: str | None,
    rationale: str | None,
    error: tuple[str | None, str | None],
    assessed_at: datetime,
) -> Assessment:
    """An assessor's verdict on one attempt's retained work. `error` is the class and
    reason of the assessing trial's end (`contracts/outcome_classes.py`). Work the platform
    failed to produce stays a platform error whoever assesses it."""
    rewards = json.loads(rewards_json) if rewards_json else None
    reward = _reward(rewards) if rewards else None
    error_class, reason = error
    if outcome.error_class == "platform":
        error_class, reason = "platform", outcome.error_reason
    elif error_class is None and reward is None:
        why = "the verifier wrote none" if rewards is None else f"{sorted(rewards)} has no 'reward'"
        error_class, reason = "task", f"no reward: {why}"
    valid = error_class is None
    return Assessment(
        assessment_id=assessment_id,
        run_id=outcome.run_id,
        batch=outcome.batch,
        attempt_id=outcome.attempt_id,
        task_name=outcome.task_name,
        assessor=assessor.name,
        assessor_digest=assessor.digest or outcome.task_digest,
        source_trial_id=outcome.trial_id,
        artifacts_digest=outcome.artifacts_digest,
        reward=reward if valid else None,
        rewards_json=rewards_json,
        valid=valid,
        error_class=error_class,
        reason=reason,
        rationale=rationale,
        assessed_at=assessed_at,
    )


def trial_assessment(outcome: TrialOutcome, assessor: Assessor) -> Assessment:
    """The assessment made by the verifier inside the actor's own trial."""
    return assessment(
        outcome,
        assessor,
        assessment_id=f"{outcome.attempt_id}.trial",
        rewards_json=outcome.rewards_json,
        rationale=outcome.rationale,
        error=(outcome.error_class, outcome.error_reason),
        assessed_at=outcome.finished_at or datetime.now(UTC),
    )
