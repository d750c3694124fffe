"""Assessments made by each task's own verifier during the actor's trial."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.trial import TrialOutcome

VERIFIER = "task-verifier"


def _reward(rewards: dict[str, float]) -> float | None:
    """The headline reward: Harbor's `reward` key, or the only key there is."""
    if "reward" in rewards:
        return float(rewards["reward"])
    if len(rewards) == 1:
        return float(next(iter(rewards.values())))
    return None


def verifier_assessment(outcome: TrialOutcome) -> Assessment:
    rewards = json.loads(outcome.rewards_json) if outcome.rewards_json else None
    reward = _reward(rewards) if rewards else None
    valid = outcome.reward_valid and reward is not None
    if valid:
        reason = None
    elif rewards is None:
        reason = f"no reward: {outcome.exception_type or 'the verifier wrote none'}"
    elif reward is None:
        reason = f"rewards {sorted(rewards)} have no 'reward' key"
    else:
        reason = f"reward not valid after {outcome.exception_type}"
    return Assessment(
        assessment_id=f"{outcome.attempt_id}.{VERIFIER}",
        run_id=outcome.run_id,
        batch=outcome.batch,
        attempt_id=outcome.attempt_id,
        task_name=outcome.task_name,
        assessor=VERIFIER,
        assessor_digest=outcome.task_digest,
        source_trial_id=outcome.trial_id,
        artifacts_digest=outcome.artifacts_digest,
        reward=reward if valid else None,
        rewards_json=outcome.rewards_json,
        valid=valid,
        reason=reason,
        rationale=None,
        assessed_at=outcome.finished_at or datetime.now(UTC),
    )
