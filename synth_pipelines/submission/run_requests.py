"""An operator's submission, read, validated and accepted as a run.

`synth run start` and the Dagster job `launch_experiment` both call `submit_run`, so
a run launched from either has the same validation, the same idempotency-key
semantics and the same identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import Engine

from synth_pipelines.contracts.plan import Plan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.contracts.validation_errors import describe_validation_error
from synth_pipelines.control.ownership import (
    UnknownCheckpointError,
    owned_checkpoint,
)
from synth_pipelines.control.runs import accept_run
from synth_pipelines.registry.datasets import get_dataset
from synth_pipelines.registry.profiles import ProfileError, get_profile, register_profile
from synth_pipelines.runtime.served_models import ModelNotServedError
from synth_pipelines.submission.errors import SubmissionError
from synth_pipelines.submission.profiles import check_launchable


@dataclass(frozen=True)
class Submission:
    """What an operator names: each document is `@file.json` or inline JSON; profiles
    may also be a published `org/name@version`."""

    dataset: str
    actor: str
    plan: str
    judge: str | None = None
    model: str | None = None
    kinds: tuple[str, ...] = ()
    """The plan kinds the submitting command takes; empty: any."""


def read_json_argument(value: str, what: str, base_dir: Path | None = None) -> dict[str, Any]:
    """`@path/to/file.json` (relative to `base_dir`, else the working directory) or an
    inline JSON object."""
    if value.startswith("@"):
        path = (base_dir or Path()) / value[1:]
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise SubmissionError(f"{what} file {path} does not exist") from None
        except OSError as error:
            raise SubmissionError(f"cannot read {what} file {path}: {error.strerror}") from None
        source = str(path)
    else:
        text, source = value, f"the {what} argument"
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise SubmissionError(
            f"{source} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    if not isinstance(document, dict):
        raise SubmissionError(f"{source} must hold a JSON object, not {type(document).__name__}")
    return document


def _explain(error: ValidationError, what: str, source: str) -> SubmissionError:
    return SubmissionError(f"{what} {source}: {describe_validation_error(error)}")


def read_plan(value: str, base_dir: Path | None = None) -> Plan:
    document = read_json_argument(value, "plan", base_dir)
    try:
        return TypeAdapter(Plan).validate_python(document)
    except ValidationError as error:
        raise _explain(error, "plan", value) from None


def read_profile(
    engine: Engine, value: str, what: str = "profile", base_dir: Path | None = None
) -> PinnedProfile:
    """`@file.json`, inline JSON, or a published `org/name@version`."""
    if not value.startswith("@") and not value.lstrip().startswith("{"):
        try:
            return get_profile(engine, value).pinned
        except ProfileError as error:
            raise SubmissionError(f"{what}: {error}") from None
    return pinned_document(read_json_argument(value, what, base_dir), what, value)


def pinned_document(document: dict[str, Any], what: str, source: str) -> PinnedProfile:
    """The profile `document` (read from `source`), checked as one a run can launch."""
    try:
        pinned = PinnedProfile.from_document(document)
        check_launchable(pinned.profile())
    except ValidationError as error:
        raise _explain(error, what, source) from None
    except ProfileError as error:
        raise SubmissionError(f"{what}: {error}") from None
    return pinned


def check_checkpoint_owner(engine: Engine, model: str | None, owner: str, what: str) -> None:
    """A run may sample or train only from its owner's checkpoints; base models are open."""
    if model is None or not model.startswith("tinker://"):
        return
    try:
        owned_checkpoint(engine, model, owner)
    except UnknownCheckpointError as error:
        raise SubmissionError(f"{what}: {error}") from None


def build_run_request(
    engine: Engine, submission: Submission, owner: str, base_dir: Path | None = None
) -> RunRequest:
    """The request with every name resolved and pinned: dataset digest, profile bytes."""
    version = get_dataset(engine, submission.dataset)
    judge = submission.judge
    plan = read_plan(submission.plan, base_dir)
    if submission.kinds and plan.kind not in submission.kinds:
        raise SubmissionError(
            f"plan {submission.plan} is a {plan.kind!r} plan; this command takes "
            + " or ".join(repr(kind) for kind in submission.kinds)
            + " plans"
        )
    actor = read_profile(engine, submission.actor, "actor profile", base_dir)
    if plan.kind == "warm_start":
        from synth_pipelines.learning.captured_demonstrations import captured_run
        from synth_pipelines.learning.demonstrations import DemonstrationError, harness_frame

        try:
            if plan.captured_run is None:
                harness_frame(actor.profile())
            else:
                captured_run(engine, plan.captured_run, actor.digest, owner)
        except DemonstrationError as error:
            raise SubmissionError(str(error)) from None
    if submission.model is None and actor.profile().launched and actor.profile().model is None:
        raise SubmissionError(
            f"actor profile {actor.name}@{actor.version} binds no model; pass --model"
        )
    check_checkpoint_owner(
        engine,
        submission.model or actor.profile().model,
        owner,
        "--model" if submission.model else f"actor profile {actor.name}@{actor.version}",
    )
    pinned_judge = read_profile(engine, judge, "judge profile", base_dir) if judge else None
    if pinned_judge is not None:
        check_checkpoint_owner(
            engine,
            pinned_judge.profile().model,
            owner,
            f"judge profile {pinned_judge.name}@{pinned_judge.version}",
        )
    return RunRequest(
        owner=owner,
        dataset=DatasetPin(
            name=version.name,
            version=version.version,
            digest=version.digest,
            task_count=version.task_count,
        ),
        actor=actor,
        judge=pinned_judge,
        plan=plan,
        model=submission.model,
    )


class ModelCheck(Protocol):
    def require(self, model: str, *, train: bool) -> None: ...


def require_served(request: RunRequest, models: ModelCheck) -> None:
    """Refuse a run whose actor or judge model nobody serves, or that trains a model the
    training backend cannot optimize."""
    train = request.plan.kind in ("train", "warm_start")
    bound = [(request.actor_model, request.actor.profile().launched, train, "actor")]
    if request.judge is not None:
        judge = request.judge.profile()
        bound.append((judge.model, judge.launched, False, "judge"))
    for model, launched, trains, role in bound:
        if launched and model is not None:
            try:
                models.require(model, train=trains)
            except ModelNotServedError as error:
                raise SubmissionError(f"{role} model: {error}") from None


def register_profiles(engine: Engine, request: RunRequest) -> None:
    """Record the run's actor and judge in the profile registry, so `synth profile show`
    answers for every profile a run names, whether it came as a file, inline JSON or a
    published version (which is already there: a no-op)."""
    for what, pinned in (("actor", request.actor), ("judge", request.judge)):
        if pinned is None:
            continue
        try:
            register_profile(engine, pinned, request.owner)
        except ProfileError as error:
            raise SubmissionError(f"{what} profile: {error}") from None


def submit_run(
    engine: Engine,
    submission: Submission,
    owner: str,
    idempotency_key: str | None = None,
    base_dir: Path | None = None,
    *,
    org: str,
    models: ModelCheck,
) -> tuple[RunRecord, bool]:
    """Accept the submission as a run of `owner` in `org`; returns (run, created). A known
    key returns its run without asking again whether its model is served."""
    request = build_run_request(engine, submission, owner, base_dir)

    def before_create() -> None:
        require_served(request, models)
        register_profiles(engine, request)

    return accept_run(engine, request, idempotency_key, before_create=before_create, org=org)
