"""An assessment of one attempt's work by the task's verifier or a judge."""

from __future__ import annotations

from datetime import datetime

from synth_pipelines.contracts.table import TableRow


class Assessment(TableRow):
    assessment_id: str
    run_id: str
    batch: str
    attempt_id: str
    task_name: str
    assessor: str
    assessor_digest: str
    source_trial_id: str
    artifacts_digest: str | None
    reward: float | None
    rewards_json: str | None
    valid: bool
    error_class: str | None
    """Why an invalid assessment is not an outcome: 'platform' (the platform failed the
    attempt) or 'task' (its task or verifier produced no reward)."""
    reason: str | None
    """Why an invalid assessment is not an outcome; on a valid one, why its reward is 0
    without the verifier's verdict (the agent's doing kept the verifier from one)."""
    rationale: str | None
    assessed_at: datetime


def passed(reward: float | None) -> bool:
    """An attempt passes when its reward reaches the full score of 1."""
    return reward is not None and reward >= 1.0
