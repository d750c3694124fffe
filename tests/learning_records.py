"""Hand-built captured calls, outcomes and assessments for tests of the learning joins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.trial import TrialOutcome

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SAMPLER = "tinker://r-1:train:0/sampler_weights/b0000"


def call(
    attempt: str,
    index: int,
    prompt: list[int],
    completion: list[int],
    logprobs: list[float],
    *,
    agent: str = "main",
    role: str = "actor",
    sampler: str = SAMPLER,
) -> Interaction:
    return Interaction(
        call_id=f"{attempt}-{agent}-{index}",
        run_id="r-1",
        batch="r-1.b0000",
        attempt_id=attempt,
        trial_id=f"trial-{attempt}",
        owner="tester",
        role=role,
        agent_id=agent,
        parent_agent_id=None if agent == "main" else "main",
        agent_type=None,
        native_session_id="s-1",
        call_index=index,
        model=sampler,
        sampler=sampler,
        temperature=1.0,
        prompt_tokens=prompt,
        completion_tokens=completion,
        logprobs=logprobs,
        sampler_stop_reason="stop",
        stop_reason="end_turn",
        parse_error=False,
        fitted=False,
        request_json="{}",
        effective_request_json=None,
        response_json="{}",
        render_ms=0.0,
        sample_ms=0.0,
        parse_ms=0.0,
        total_ms=0.0,
        created_at=T0 + timedelta(seconds=index + (10 if agent != "main" else 0)),
    )


def outcome(attempt: str, group: int = 0, task: str = "t/task") -> TrialOutcome:
    return TrialOutcome(
        run_id="r-1",
        batch="r-1.b0000",
        attempt_id=attempt,
        group_index=group,
        attempt_index=int(attempt.rsplit("a", 1)[-1]) if attempt[-1].isdigit() else 0,
        task_position=group,
        task_name=task,
        task_digest="sha256:" + "0" * 64,
        trial_name=attempt,
        trial_id=f"trial-{attempt}",
        actor_digest="sha256:" + "1" * 64,
        effective_model=SAMPLER,
        status="completed",
        rewards_json=None,
        rationale=None,
        error_class=None,
        error_reason=None,
        exception_type=None,
        exception_message=None,
        trial_key="k",
        trial_sha256="s",
        artifacts_digest=None,
        started_at=T0,
        finished_at=T0,
        duration_sec=1.0,
    )


def assessment(attempt: str, reward: float | None, *, valid: bool = True) -> Assessment:
    return Assessment(
        assessment_id=f"{attempt}.v",
        run_id="r-1",
        batch="r-1.b0000",
        attempt_id=attempt,
        task_name="t/task",
        assessor="task-verifier",
        assessor_digest="sha256:" + "0" * 64,
        source_trial_id=f"trial-{attempt}",
        artifacts_digest=None,
        reward=reward,
        rewards_json=None,
        valid=valid,
        error_class=None if valid else "task",
        reason=None if valid else "verifier wrote none",
        rationale=None,
        assessed_at=T0,
    )
