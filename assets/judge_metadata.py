"""Which model judged a batch's assessments, and the route that served it, for the
materialization's metadata: a judge on an inference-only route is told apart from one the
training backend serves."""

from __future__ import annotations

from synth_pipelines.config import Settings
from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import RunSpec
from synth_pipelines.rendering.model_registry import TinkerRoute, configured_registry


def assessing_judge(spec: RunSpec, regrade_id: str, regrade_judge: str) -> PinnedProfile | None:
    """The judge of these assessments: a regrade's (None: the tasks' verifiers again), else
    the run's own."""
    if regrade_id:
        return PinnedProfile.model_validate_json(regrade_judge) if regrade_judge else None
    return spec.judge


def judge_route(model: str, deployment: Settings) -> str:
    """`tinker`, or an inference-only route as captured calls name it
    (`openai_chat:MODEL@URL`), as the deployment's model registry serves it."""
    if model.startswith("tinker://"):
        return "tinker"
    try:
        backend = configured_registry(deployment).get(model).backend
    except ApiError:
        return "not served"
    return "tinker" if isinstance(backend, TinkerRoute) else backend.sampler


def judge_metadata(judge: PinnedProfile | None, deployment: Settings) -> dict[str, str]:
    """`judge_model` and `judge_route`; nothing for the tasks' own verifiers."""
    if judge is None:
        return {}
    model = judge.profile().model or ""
    return {"judge_model": model, "judge_route": judge_route(model, deployment)}
