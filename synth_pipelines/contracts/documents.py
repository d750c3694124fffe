"""The documented shape of every `--json` output.

Each printing command validates its document against the model named here before it
prints, so the output and the schema (`synth schema COMMAND`) cannot drift apart. A
program can rely on these fields; new fields are added, never renamed. A control record
is its own document (`synth_pipelines/contracts/`), or a view that adds to it what the
command knows besides; only what the CLI alone reports is declared here.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.checkpoint_lineage import CheckpointLineage
from synth_pipelines.contracts.dataset import DatasetVersion, TaskRef
from synth_pipelines.contracts.operator_key import CreatedKey, OperatorKey
from synth_pipelines.contracts.org_limits import OrgLimits
from synth_pipelines.contracts.policy_update import BatchLearningRow, PolicyUpdate
from synth_pipelines.contracts.pool import PoolDocument
from synth_pipelines.contracts.published_profile import PublishedProfile
from synth_pipelines.contracts.regrade import Regrade
from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.contracts.run_export import ExportedTable
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.ui_session import UiLogin
from synth_pipelines.contracts.worker_attempt import WorkerAttempt


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PublishedDataset(DatasetVersion):
    created: bool


class PublishProgressDocument(Document):
    """One line of `synth dataset publish --json` progress on stderr: after each task is
    packed, then after each is uploaded (`done` of `total` in that phase)."""

    dataset: str
    phase: Literal["packed", "uploaded"]
    task: str
    done: int
    total: int


class DatasetWithTasks(DatasetVersion):
    tasks: list[TaskRef]


class RunSummary(Document):
    run_id: str
    status: str
    kind: str
    owner: str
    dataset: str
    actor: str
    actor_digest: str
    judge: str | None
    model: str | None
    actor_model: str | None
    """The model the actor samples from: the run's `--model`, else its profile's."""
    batches: int
    idempotency_key: str
    created_at: str
    updated_at: str
    dagster_url: str

    @classmethod
    def of(cls, run: RunRecord, dagster_url: str) -> RunSummary:
        """The summary of `run`, linking its runs in the Dagster UI at `dagster_url`."""
        spec = run.spec
        return cls(
            run_id=run.run_id,
            status=run.status,
            kind=run.kind,
            owner=run.owner,
            dataset=spec.dataset.ref,
            actor=f"{spec.actor.name}@{spec.actor.version}",
            actor_digest=spec.actor.digest,
            judge=f"{spec.judge.name}@{spec.judge.version}" if spec.judge else None,
            model=spec.model,
            actor_model=spec.actor_model,
            batches=run.batch_count,
            idempotency_key=run.idempotency_key,
            created_at=run.created_at.isoformat(),
            updated_at=run.updated_at.isoformat(),
            dagster_url=dagster_runs_url(dagster_url, run.run_id),
        )


def dagster_runs_url(dagster_url: str, run_id: str) -> str:
    """The Dagster UI's list of a run's Dagster runs (those tagged with its id)."""
    return f"{dagster_url}/runs?q%5B0%5D=tag%3Asynth%2Frun%3D{run_id}"


class AcceptedRun(RunSummary):
    created: bool


class ResultSummary(Document):
    attempts: int
    assessed: int
    passed: int
    platform_errors: int
    task_errors: int
    pass_rate: float | None
    mean_reward: float | None
    error_reasons: dict[str, int]


class TaskResultDocument(Document):
    task: str
    attempts: int
    rewards: list[float | None]
    pass_rate: float | None
    trial_records: list[str]
    failures: list[str]


class FailureCauseDocument(Document):
    error_type: str
    message: str
    attempt: str | None


class StopDocument(Document):
    event: str
    batch: str | None
    cause: FailureCauseDocument | None


class RunResultsDocument(RunSummary):
    summary: ResultSummary
    stopped_by: StopDocument | None
    batches_done: int
    learning: list[BatchLearningRow]
    learning_warnings: list[str]
    tasks: list[TaskResultDocument]
    trial_records: str


class RunProgressDocument(Document):
    """One line of a waiting command's progress on stderr with `--json` (one per change).
    `reward_mean` and `step_applied` are the last batch whose update is recorded;
    `steps_done`/`steps_total` a warm start's supervised steps (null for other runs). For
    `run regrade --wait`, `kind` is "regrade", `status` the backfill's, and attempts count
    the regrade's assessments."""

    run_id: str
    kind: str
    status: str
    batches_done: int
    batches_total: int
    attempts_done: int
    attempts_total: int
    passed: int
    reward_mean: float | None
    step_applied: bool | None
    steps_done: int | None
    steps_total: int | None


class BatchMetricsDocument(Document):
    """One batch of `synth run metrics`: its attempts and reward, and for a training batch
    what learning did with them (null for a batch of a run that does not train, and for a
    training batch whose update is not recorded yet)."""

    batch_index: int
    batch: str
    attempts: int
    passed: int
    reward_mean: float | None
    sampler: str | None
    groups_used: int | None
    groups_dropped: int | None
    datums: int | None
    tokens: int | None
    """Sampled (action) tokens of the batch: tokens per turn x turns x attempts."""
    step_applied: bool | None
    kl_sample_train_v1: float | None


class RunMetricsDocument(Document):
    run_id: str
    kind: str
    status: str
    batches: list[BatchMetricsDocument]


class AssessmentSetDocument(Document):
    label: str
    assessor: str
    assessor_digest: str
    assessed: int
    pass_rate: float | None


class AgreementDocument(Document):
    first: str
    second: str
    compared: int
    agreeing: int
    rate: float | None
    differing_tasks: list[str]


class AssessmentComparison(Document):
    run_id: str
    assessment_sets: list[AssessmentSetDocument]
    agreements: list[AgreementDocument]
    tasks: dict[str, dict[str, list[float | None]]]


class ResumedRun(Document):
    run_id: str
    resumed_batch: int


class CancelledRun(Document):
    run_id: str
    status: str
    cancelled: bool
    terminated: list[str]
    """The Dagster runs of its batches that were terminated."""
    termination_error: str | None = None
    """Why its batches' Dagster runs could not be asked to stop (the Dagster webserver did
    not answer): the run is cancelled all the same, and no further batch is admitted."""


class RegradeDocument(Regrade):
    backfill_status: str
    dagster_url: str


class PublishedProfileDocument(PublishedProfile):
    created: bool


class AgentRunDocument(Document):
    run_id: str
    attempt_id: str
    profile: str
    profile_digest: str
    model: str
    exit_code: int
    missing_outputs: list[str]
    duration_sec: float
    launch_digest: str
    logs: str
    workspace: str


class ServiceStarted(Document):
    service: str
    pid: int
    started: bool
    address: str
    log: str
    models: list[str] | None
    """What the model service serves (None for the other services)."""
    api_key_file: str | None = None
    """The gateway's: the file holding the local operator's API key (None for the others)."""
    ca_file: str | None = None
    """The gateway's on HTTPS: the certificate authority clients check it by
    (`SYNTH_GATEWAY_CA`); None otherwise."""
    ui_url: str | None = None
    """The gateway's: the Dagster UI as operators reach it, admins' keys only (`synth ui`
    signs a browser in); the webserver itself listens on loopback. None for the others."""


class ProductionDeploymentStarted(Document):
    env_file: str
    """The deployment's variables: `set -a; . FILE; set +a` points `synth` at it."""
    image: str
    """The project's image every Dagster run's container runs."""
    docker_host: str
    dagster_url: str
    """The Dagster UI as operators reach it: through the gateway (`ServiceStarted.ui_url`)."""
    seconds: float
    """From the command's start until every service answered."""
    services: list[ServiceStarted]


class ServiceStopped(Document):
    service: str
    stopped: bool


class TokenDocument(Document):
    token: str
    expires_in: int


class ComparedRun(Document):
    run_id: str
    status: str
    dataset: str
    model: str | None
    attempts: int
    assessed: int
    passed: int
    platform_errors: int
    task_errors: int
    pass_at_1: float | None
    wilson_95: tuple[float, float] | None


class RunComparison(Document):
    baseline: ComparedRun
    candidate: ComparedRun
    difference: float | None
    fisher_p_two_sided: float
    fisher_p_greater: float
    notes: list[str]


class RunExportDocument(ExportedTable, Document):
    """Where `synth run export` wrote a run's table, and what it holds."""

    path: str


class ErrorDocument(Document):
    """What any command prints with `--json` when it refuses its input."""

    error: str
    exit_code: int


class TeacherScript(Document):
    url: str
    dataset: str
    engine: str
    model: str
    tasks: int
    entries: int


class ImageBaseDocument(Document):
    key: str
    names: list[str]
    size_bytes: int
    path: str


class ImageLayerDocument(Document):
    key: str
    parent: str | None
    description: str
    size_bytes: int
    built_at: str
    last_used: str
    in_use: bool


class ImageCacheDocument(Document):
    root: str
    bound_bytes: int
    layer_bytes: int
    base_bytes: int
    bases: list[ImageBaseDocument]
    layers: list[ImageLayerDocument]


class ImageBuildDocument(Document):
    task: str
    base: str
    image: str
    layers: int
    built: int
    cached: int
    size_bytes: int
    seconds: float


class ProjectImageDocument(Document):
    image: str
    dependencies: str
    built: bool
    docker_host: str
    seconds: float


class ImagePruneDocument(Document):
    keep_bytes: int
    removed: list[ImageLayerDocument]
    freed_bytes: int
    layer_bytes: int


class AttemptMessageDocument(Document):
    role: str
    content: list[dict[str, Any]]


class ModelCallDocument(Document):
    call_id: str
    call_index: int
    agent_id: str
    model: str
    sampler: str
    chunk_key: str | None
    prompt_tokens: int
    completion_tokens: int
    completion_logprob: float
    stop_reason: str
    input: list[AttemptMessageDocument]
    output: list[dict[str, Any]]


class ToolUseDocument(Document):
    tool_use_id: str
    model_call_id: str
    name: str
    input: dict[str, Any]
    output: str | None
    is_error: bool | None


class AttemptDocument(Document):
    attempt_id: str
    run_id: str
    batch: str
    task_name: str
    trial_name: str
    status: str
    system: str | None
    calls: list[ModelCallDocument]
    tool_calls: list[ToolUseDocument]
    evidence_problem: str | None
    reward: float | None
    rewards: dict[str, Any] | None
    assessor: str | None
    rationale: str | None
    verifier_output: str | None
    exception: str | None


class ServedModelDocument(Document):
    """One model the capture proxy serves: the fields of its `GET /v1/models` entry."""

    id: str
    display_name: str
    family: str
    max_input_tokens: int
    """The context window."""
    max_tokens: int
    """The output limit."""
    route: str
    """What answers it: `tinker`, or an inference-only `openai_chat` or `anthropic` route."""
    base_model: str | None
    trainable: bool


DOCUMENTS: dict[str, Any] = {
    "error": ErrorDocument,
    "pool show": PoolDocument,
    "checkpoint list": list[Checkpoint],
    "checkpoint show": CheckpointLineage,
    "attempt show": AttemptDocument,
    "dataset publish": PublishedDataset,
    "dataset publish progress": PublishProgressDocument,
    "model teach": TeacherScript,
    "model list": list[ServedModelDocument],
    "dataset show": DatasetWithTasks,
    "dataset list": list[DatasetVersion],
    "run start": AcceptedRun,
    "run show": RunResultsDocument,
    "run show --assessments": AssessmentComparison,
    "run compare": RunComparison,
    "run list": list[RunSummary],
    "run events": RunEvent,
    "run checkpoints": list[Checkpoint],
    "run workers": list[WorkerAttempt],
    "run resume": ResumedRun,
    "run cancel": CancelledRun,
    "run regrade": RegradeDocument,
    "run export": RunExportDocument,
    "run progress": RunProgressDocument,
    "run metrics": RunMetricsDocument,
    "train start": AcceptedRun,
    "train resolve": PolicyUpdate,
    "train resolve --inspect": list[PolicyUpdate],
    "profile publish": PublishedProfileDocument,
    "profile show": PublishedProfile,
    "profile list": list[PublishedProfile],
    "agent run": AgentRunDocument,
    "up": list[ServiceStarted],
    "down": list[ServiceStopped],
    "up --production": ProductionDeploymentStarted,
    "down --production": list[ServiceStopped],
    "proxy token": TokenDocument,
    "image list": ImageCacheDocument,
    "image build": list[ImageBuildDocument],
    "image prune": ImagePruneDocument,
    "image project": ProjectImageDocument,
    "ui": UiLogin,
    "admin key create": CreatedKey,
    "admin key list": list[OperatorKey],
    "admin key revoke": OperatorKey,
    "admin org limits": OrgLimits,
}


def validated(command: str, data: Any) -> Any:
    """The document in its JSON form, after checking it against its documented schema."""
    adapter = TypeAdapter(DOCUMENTS[command])
    return adapter.dump_python(adapter.validate_python(data), mode="json")


def printed(command: str, data: Any) -> str:
    """The command's documented JSON document, checked against its schema, as printed (the
    gateway answers it so, and the CLI prints it so)."""
    return json.dumps(validated(command, data), indent=2, sort_keys=True) + "\n"


class _PrintedSchema(GenerateJsonSchema):
    """A document's schema as it is printed: every field is always present, those with a
    default (a number an older record lacks) included."""

    def field_is_required(
        self,
        field: core_schema.ModelField | core_schema.DataclassField | core_schema.TypedDictField,
        total: bool,
    ) -> bool:
        return not field.get("serialization_exclude")


def schema(command: str) -> dict[str, Any]:
    return TypeAdapter(DOCUMENTS[command]).json_schema(
        mode="serialization", schema_generator=_PrintedSchema
    )
