"""The outcome of one attempt: one task, one pinned agent setup, one sandbox."""

from __future__ import annotations

from datetime import datetime

from synth_pipelines.contracts.table import TableRow


class TrialOutcome(TableRow):
    run_id: str
    batch: str
    attempt_id: str
    group_index: int
    attempt_index: int
    task_position: int
    task_name: str
    task_digest: str
    trial_name: str
    trial_id: str
    actor_digest: str
    effective_model: str | None
    status: str
    rewards_json: str | None
    rationale: str | None
    exception_type: str | None
    exception_message: str | None
    error_class: str | None
    """None: the attempt is assessed (or, unscored, completed); 'platform' or 'task': it is
    not, for `error_reason` (`contracts/outcome_classes.py`). An assessed attempt has an
    `error_reason` too when its own doing kept its verifier from producing a reward (then
    its reward is 0)."""
    error_reason: str | None
    trial_key: str
    trial_sha256: str
    artifacts_digest: str | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_sec: float
