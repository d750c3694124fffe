"""One batch of a run, as one step: its attempts, their assessments and, for training,
what was learned from them.

A training batch's sampling and learning cannot be separate steps: a group whose attempts
are all assessed is qualified, packed and sent to forward_backward while other groups of
the batch still sample, and the batch's optimizer step waits for all of them. So the whole
batch is one function (`batch`), the way tinker-cookbook's train step is one loop, and
each asset reports what that function did: `trials` (every attempt, sampled through the
batch's policy), `assessments` (their rewards), `qualified_groups` (who may teach, and
with which advantage), `datums` (exactly what forward_backward received), `policy_update`
(the optimizer step, or why there was none) and `checkpoints` (the sampler that binds the
next batch). A plan kind selects a prefix (`assets/jobs.py`); a regrade backfill selects
`assessments` alone; a resumed batch selects what it has not materialized yet. The
learning code (tinker-cookbook, and torch under it) is imported only when a batch learns,
so loading the code location stays fast for every other job.
"""

import asyncio
import hashlib
import time
from collections.abc import Awaitable
from functools import partial
from typing import TYPE_CHECKING

import dagster as dg
import pyarrow as pa
from sqlalchemy import Engine

from assets.captured_interactions import captured_interactions
from assets.curve_metadata import curve_metadata
from assets.judge_metadata import assessing_judge, judge_metadata
from assets.partitions import batches
from assets.worker_claims import claimed
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from resources.training import TrainingService
from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.batch_learning import BatchLearning
from synth_pipelines.contracts.learning import (
    DatumRow,
    PolicyBinding,
    QualifiedAttempt,
    same_datums,
)
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import RunSpec, batch_key, parse_batch_key
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.events import record_event
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.table_outputs import load_table
from synth_pipelines.control.worker_attempts import StaleWorkerError
from synth_pipelines.control.worker_claim import WorkerClaim
from synth_pipelines.judging.assessing import Assessor, trial_assessment
from synth_pipelines.runtime.batch_plan import plan_batch
from synth_pipelines.runtime.regrade import RegradeRefusedError, regrade_batch
from synth_pipelines.runtime.results import summarize, summarize_unscored
from synth_pipelines.runtime.trial_batch import run_batch_trials
from synth_pipelines.runtime.worker_lease import BatchStoppedError, HeldBatch
from synth_pipelines.storage.objectstore import ObjectStore

if TYPE_CHECKING:
    from synth_pipelines.learning.batch_learning import EvidenceAudit
    from synth_pipelines.learning.training_step import TrainingStep

LEARNING = ("qualified_groups", "datums", "policy_update", "checkpoints")
"""A training batch's learning assets, in the order the step produces them."""
PROGRESS_LOG_SEC = 10.0
"""A completed attempt is logged only if the batch's last line is this old (or it is the
batch's last): each line is a write to Dagster's event log, which for every attempt cost
the run worker more CPU than the attempt's own event. An attempt that did not complete is
always logged; every attempt has its `attempt.finished` event."""


class BatchConfig(dg.Config):
    """Set only for a regrade: its id, and the judge as pinned bytes (empty: the task's
    own verifier assesses the retained work again)."""

    regrade_id: str = ""
    judge: str = ""


def _table(group: str, description: str, kinds: set[str]) -> dg.AssetOut:
    return dg.AssetOut(
        io_manager_key="table_io",
        group_name=group,
        kinds=kinds,
        description=description,
        is_required=False,
    )


def _fact(description: str) -> dg.AssetOut:
    return dg.AssetOut(
        dagster_type=dg.Nothing,
        group_name="learning",
        kinds={"tinker"},
        description=description,
        is_required=False,
    )


TRIALS, ASSESSMENTS = dg.AssetKey("trials"), dg.AssetKey("assessments")
QUALIFIED, DATUMS = dg.AssetKey("qualified_groups"), dg.AssetKey("datums")
UPDATE, CHECKPOINTS = dg.AssetKey("policy_update"), dg.AssetKey("checkpoints")


@dg.multi_asset(
    outs={
        "trials": _table(
            "sampling",
            "Every attempt of the batch's sampling groups, run as a Harbor trial through the "
            "batch's policy: outcome class, rewards, the archived trial record.",
            {"harbor", "parquet"},
        ),
        "assessments": _table(
            "evaluation",
            "Each attempt's reward from the task's verifier or a judge; regrades add sets.",
            {"parquet"},
        ),
        "qualified_groups": _table(
            "learning",
            "Training: every attempt's standing (reward, exclusion reason, group-relative "
            "advantage), settled before advantages.",
            {"parquet"},
        ),
        "datums": _table(
            "learning",
            "Training: the datums forward_backward received, packed by tinker-cookbook from "
            "the sampler's own tokens and logprobs.",
            {"parquet"},
        ),
        "policy_update": _fact(
            "Training: the batch's one optimizer step (loss, gradient norm, sampler/trainer "
            "agreement), or why it applied none."
        ),
        "checkpoints": _fact(
            "Training: sampler weights and trainer state that bind the next batch, with the "
            "run's reward and KL per batch."
        ),
    },
    partitions_def=batches,
    deps=[captured_interactions],
    internal_asset_deps={
        "trials": {dg.AssetKey("policy")},
        "assessments": {TRIALS},
        "qualified_groups": {TRIALS, ASSESSMENTS, captured_interactions.key, dg.AssetKey("policy")},
        "datums": {QUALIFIED},
        "policy_update": {DATUMS},
        "checkpoints": {UPDATE},
    },
    check_specs=[
        dg.AssetCheckSpec(
            "evidence_integrity",
            asset=QUALIFIED,
            blocking=True,
            description="every evidence chunk read for learning matches its recorded SHA-256 "
            "and every sampled token has one sampler logprob",
        ),
        dg.AssetCheckSpec("datum_alignment", asset=DATUMS, blocking=True),
    ],
    can_subset=True,
)
# No return annotation: Dagster reads one as the outputs' types and, recognizing only sync
# generators as generators, takes an async generator's annotation for a returned tuple's.
async def batch(  # type: ignore[no-untyped-def]
    context: dg.AssetExecutionContext,
    config: BatchConfig,
    policy: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
    training: TrainingService,
    deployment: dg.ResourceParam[Settings],
):
    engine, store = control.engine(), objects.store()
    run_id, index = parse_batch_key(context.partition_key)
    spec = get_run(engine, run_id).spec
    steps = partial(_steps, context, config, policy, engine, store, training, deployment, spec)
    if config.regrade_id:
        # A regrade assesses retained work again: it claims no batch and makes no progress.
        async for result in steps(index, None):
            yield result
        return
    claim = await asyncio.to_thread(claimed, context, engine, deployment, spec, index)
    if claim is None:
        return
    async with HeldBatch(claim) as held:
        try:
            async for result in steps(index, held):
                yield result
        except StaleWorkerError as refused:
            context.log.warning(f"{refused}; this run stops without writing more")
            return
        except BatchStoppedError as stopped:
            if stopped.reply.action == "superseded":
                context.log.warning(f"{stopped}; this run stops without writing more")
                return
            await asyncio.to_thread(claim.release, "cancelled", stopped.reply.reason)
            raise dg.Failure(
                description=f"batch {context.partition_key} stopped: {stopped.reply.reason}; "
                f"what it finished: {dict(claim.appended)}"
            ) from None
        except Exception as error:
            await asyncio.to_thread(claim.release, "failed", f"{type(error).__name__}: {error}")
            raise
    await asyncio.to_thread(
        claim.release, "released", "the launched steps ended before the batch completed"
    )


async def _guarded[T](held: HeldBatch | None, work: Awaitable[T]) -> T:
    return await (held.guard(work) if held is not None else work)


async def _steps(  # type: ignore[no-untyped-def]
    context: dg.AssetExecutionContext,
    config: BatchConfig,
    policy: pa.Table,
    engine: Engine,
    store: ObjectStore,
    training: TrainingService,
    deployment: Settings,
    spec: RunSpec,
    index: int,
    held: HeldBatch | None,
):
    """The batch's steps under `held` (None only for a regrade)."""
    (binding,) = PolicyBinding.from_table(policy)
    selected = {key.to_user_string() for key in context.selected_asset_keys}
    step = None
    if isinstance(spec.plan, TrainPlan) and selected & set(LEARNING):
        from synth_pipelines.learning.trainer import Trainer
        from synth_pipelines.learning.training_step import TrainingStep

        assert held is not None, "a regrade does not learn"
        step = TrainingStep(
            engine,
            held.claim,
            store,
            spec,
            index,
            binding,
            Trainer(training.service(), binding, spec.plan, reconnect=training.new_service),
            submits="policy_update" in selected,
        )
    started = time.monotonic()
    if "trials" in selected:
        assert held is not None, "a regrade does not sample"
        outcomes = await _guarded(
            held,
            _sample(context, engine, store, deployment, held.claim, spec, index, binding, step),
        )
        yield dg.Output(
            TrialOutcome.to_table(outcomes),
            output_name="trials",
            metadata=_trials_metadata(spec, binding, outcomes),
        )
    else:
        outcomes = TrialOutcome.from_table(
            load_table(engine, store, "trials", context.partition_key)
        )
    sampling_sec = time.monotonic() - started
    if "assessments" in selected:
        claim = held.claim if held is not None else None
        assessments = await _guarded(
            held, _assess(context, engine, store, deployment, claim, spec, index, config, outcomes)
        )
        yield dg.Output(
            Assessment.to_table(assessments),
            output_name="assessments",
            metadata={
                **_assessment_metadata(assessments, config.regrade_id),
                **judge_metadata(
                    assessing_judge(spec, config.regrade_id, config.judge), deployment
                ),
            },
            data_version=dg.DataVersion(assessment_version(assessments)),
        )
    if step is None:
        return
    if "trials" not in selected and selected & {"qualified_groups", "datums", "policy_update"}:
        # Resumed after sampling: every group is learned from now, in order.
        for group in _groups(outcomes):
            await _guarded(held, step.submit_group(group))
    audit = step.audit
    if "qualified_groups" in selected:
        yield dg.AssetCheckResult(
            check_name="evidence_integrity",
            asset_key=QUALIFIED,
            passed=audit.passed,
            metadata={
                "chunks_verified": audit.chunks,
                "bytes_verified": audit.bytes,
                "calls": audit.calls,
                "integrity_failures": dg.MetadataValue.json(audit.problems),
                "misaligned_calls": dg.MetadataValue.json(list(audit.misaligned)),
            },
        )
        yield dg.Output(
            QualifiedAttempt.to_table(step.standings),
            output_name="qualified_groups",
            metadata=_qualified_metadata(step.standings, audit),
        )
    learns = bool(selected & {"policy_update", "checkpoints"})
    if learns and not audit.passed:
        raise dg.Failure(
            description="evidence failed its integrity check; no optimizer step is applied: "
            f"{audit.problems or list(audit.misaligned)}"
        )
    rows = step.datums
    if "datums" in selected:
        broken = [
            f"{row.attempt_id}/{row.agent_id}/{row.datum_index}"
            for row in rows
            if not (
                len(row.model_input)
                == len(row.target_tokens)
                == len(row.logprobs)
                == len(row.advantages)
                == len(row.mask)
            )
        ]
        yield dg.AssetCheckResult(
            check_name="datum_alignment",
            asset_key=DATUMS,
            passed=not broken,
            metadata={"datums": len(rows), "misaligned": dg.MetadataValue.json(broken)},
        )
        if broken:
            raise dg.Failure(description=f"misaligned datums, no optimizer step: {broken}")
        yield dg.Output(
            DatumRow.to_table(rows),
            output_name="datums",
            metadata={
                "datums": len(rows),
                "tokens": sum(len(r.model_input) for r in rows),
                "action_tokens": int(sum(sum(r.mask) for r in rows)),
                "attempts": len({r.attempt_id for r in rows}),
            },
        )
    elif "policy_update" in selected:
        stored = DatumRow.from_table(load_table(engine, store, "datums", context.partition_key))
        if not same_datums(stored, rows):
            raise dg.Failure(
                description="the evidence read now packs other datums than the batch's datums "
                "table; evidence changed after the datums were recorded"
            )
    if not learns:
        return
    from synth_pipelines.control.policy_updates import UnresolvedUpdateError

    try:
        learning = await _guarded(held, step.update(sampling_sec))
    except UnresolvedUpdateError as error:
        raise dg.Failure(description=str(error)) from None
    if not learning.optimizer_step:
        context.log.warning(f"batch {context.partition_key}: {learning.no_step_reason}")
    if "policy_update" in selected:
        # Materialized once the step is acknowledged: a resume after this point only saves
        # the sampler.
        yield dg.Output(None, output_name="policy_update", metadata=_update_metadata(learning))
    if "checkpoints" in selected:
        try:
            checkpoint = await _guarded(held, step.checkpoint(learning))
        except UnresolvedUpdateError as error:
            raise dg.Failure(description=str(error)) from None
        yield dg.Output(
            None,
            output_name="checkpoints",
            metadata={
                "sampler": checkpoint.sampler_path,
                "state": checkpoint.state_path,
                "dataset_cursor": checkpoint.dataset_cursor,
                "optimizer_steps": checkpoint.optimizer_steps,
                **_binds(spec, index, checkpoint.sampler_path),
                **await asyncio.to_thread(_curves, engine, spec, index),
            },
        )


def _groups(outcomes: list[TrialOutcome]) -> list[list[TrialOutcome]]:
    by_group: dict[int, list[TrialOutcome]] = {}
    for outcome in outcomes:
        by_group.setdefault(outcome.group_index, []).append(outcome)
    return [by_group[index] for index in sorted(by_group)]


async def _sample(
    context: dg.AssetExecutionContext,
    engine: Engine,
    store: ObjectStore,
    deployment: Settings,
    claim: WorkerClaim,
    spec: RunSpec,
    index: int,
    binding: PolicyBinding,
    step: "TrainingStep | None",
) -> list[TrialOutcome]:
    plan = await asyncio.to_thread(plan_batch, engine, spec, index)
    await asyncio.to_thread(
        claim.append,
        "batch.started",
        {
            "batch": plan.batch,
            "index": index,
            "attempts": plan.attempt_count,
            "attempt_ids": [a for group in plan.groups for a in group.attempt_ids],
        },
    )
    context.log.info(
        f"batch {plan.batch}: {len(plan.groups)} groups, {plan.attempt_count} attempts, "
        f"sampling through {binding.sampler}"
    )
    done = 0
    logged_at = time.monotonic()

    def progress(outcome: TrialOutcome) -> None:
        nonlocal done, logged_at
        done += 1
        state = f"{outcome.error_class} error" if outcome.error_class else outcome.status
        if (
            state == "completed"
            and done < plan.attempt_count
            and time.monotonic() - logged_at < PROGRESS_LOG_SEC
        ):
            return
        logged_at = time.monotonic()
        context.log.info(
            f"[{done}/{plan.attempt_count}] {outcome.attempt_id} {outcome.task_name}: {state} "
            f"rewards={outcome.rewards_json}"
            + (f" ({outcome.error_reason})" if outcome.error_reason else "")
        )

    outcomes = await run_batch_trials(
        spec,
        plan,
        store,
        engine,
        deployment,
        claim,
        model=binding.sampler or None,
        verify=spec.kind in ("eval", "train"),
        on_outcome=progress,
        on_group=partial(_submit_group, context, step) if step is not None else None,
    )
    if spec.kind == "execute":
        summary = summarize_unscored(outcomes).as_dict()
        await asyncio.to_thread(claim.complete, spec, summary)
    return outcomes


async def _submit_group(
    context: dg.AssetExecutionContext, step: "TrainingStep", outcomes: list[TrialOutcome]
) -> None:
    learned = await step.submit_group(outcomes)
    context.log.info(
        f"group {outcomes[0].group_index} ready: {len(learned.datums)} datums sent to "
        "forward_backward"
    )


def _trials_metadata(
    spec: RunSpec, binding: PolicyBinding, outcomes: list[TrialOutcome]
) -> dict[str, str | int | dg.MetadataValue]:
    unscored = summarize_unscored(outcomes)
    return {
        "run": spec.run_id,
        "dataset": spec.dataset.ref,
        "attempts": len(outcomes),
        "failed": sum(outcome.status != "completed" for outcome in outcomes),
        "platform_errors": unscored.platform_errors,
        "task_errors": unscored.task_errors,
        "error_reasons": dg.MetadataValue.json(unscored.error_reasons),
        "sampler": binding.sampler,
        "actor_digest": spec.actor.digest,
        "attempt_view": dg.MetadataValue.md(_attempt_view(outcomes)),
    }


ATTEMPTS_NAMED = 8
"""Attempts named on the page: the UI shows markdown in place only while it is short."""


def _attempt_view(outcomes: list[TrialOutcome]) -> str:
    """How to read any attempt of the batch: the command of the attempt view."""
    named = ", ".join(f"`{outcome.attempt_id}`" for outcome in outcomes[:ATTEMPTS_NAMED])
    more = f" and {len(outcomes) - ATTEMPTS_NAMED} more" if len(outcomes) > ATTEMPTS_NAMED else ""
    return (
        "`synth attempt show ATTEMPT --html ATTEMPT.html` writes one attempt's conversation, "
        f"tool calls and grade as a page; this batch's attempts: {named}{more} "
        "(all in `synth run events RUN`)."
    )


def assessment_version(rows: list[Assessment]) -> str:
    """Names who assessed which work, so a regrade with another judge is a new version
    (Dagster's automatic data versions ignore config)."""
    digest = hashlib.sha256()
    for row in sorted(rows, key=lambda r: r.assessment_id):
        digest.update(
            f"{row.attempt_id}\0{row.assessor_digest}\0{row.artifacts_digest}\0{row.reward}\n".encode()
        )
    return digest.hexdigest()


async def _assess(
    context: dg.AssetExecutionContext,
    engine: Engine,
    store: ObjectStore,
    deployment: Settings,
    claim: WorkerClaim | None,
    spec: RunSpec,
    index: int,
    config: BatchConfig,
    outcomes: list[TrialOutcome],
) -> list[Assessment]:
    """The verdicts of the trials' own verifiers, or, for a regrade, of the judge run again
    on the retained work (the actor never runs)."""
    if not config.regrade_id:
        rows = [trial_assessment(outcome, Assessor.of(spec.judge)) for outcome in outcomes]
        if spec.kind == "eval":
            assert claim is not None, "only a regrade assesses without a claim"
            await asyncio.to_thread(claim.complete, spec, summarize(rows).as_dict())
        return rows
    judge = PinnedProfile.model_validate_json(config.judge) if config.judge else None
    try:
        rows = await regrade_batch(
            engine,
            store,
            spec,
            index,
            outcomes,
            judge,
            config.regrade_id,
            deployment,
        )
    except RegradeRefusedError as error:
        raise dg.Failure(description=str(error)) from None
    await asyncio.to_thread(
        record_event,
        engine,
        spec.run_id,
        "regrade.batch_assessed",
        {
            "regrade_id": config.regrade_id,
            "batch": context.partition_key,
            **summarize(rows).as_dict(),
        },
    )
    return rows


def _assessment_metadata(
    rows: list[Assessment], regrade_id: str
) -> dict[str, str | int | dg.MetadataValue]:
    summary = summarize(rows)
    return {
        "assessor": rows[0].assessor if rows else "",
        "regrade": regrade_id,
        "attempts": summary.attempts,
        "assessed": summary.assessed,
        "platform_errors": summary.platform_errors,
        "task_errors": summary.task_errors,
        "error_reasons": dg.MetadataValue.json(summary.error_reasons),
        "pass_rate": dg.MetadataValue.float(summary.pass_rate or 0.0),
        "mean_reward": dg.MetadataValue.float(summary.mean_reward or 0.0),
    }


def _qualified_metadata(
    standings: list[QualifiedAttempt], audit: "EvidenceAudit"
) -> dict[str, int | dg.MetadataValue]:
    exclusions: dict[str, int] = {}
    for standing in standings:
        reason = standing.exclusion_reason or standing.group_exclusion_reason
        if reason:
            exclusions[reason] = exclusions.get(reason, 0) + 1
    rewards = [s.reward for s in standings if s.reward is not None]
    return {
        "attempts": len(standings),
        "qualified_attempts": sum(s.qualified for s in standings),
        "groups": len({s.group_index for s in standings}),
        "qualified_groups": len({s.group_index for s in standings if s.group_qualified}),
        "exclusions": dg.MetadataValue.json(exclusions),
        "reward_mean": dg.MetadataValue.float(sum(rewards) / len(rewards) if rewards else 0.0),
        "evidence_chunks": audit.chunks,
        "evidence_bytes": audit.bytes,
    }


def _update_metadata(learning: BatchLearning) -> dict[str, str | int | dg.MetadataValue]:
    shown: dict[str, str | int | dg.MetadataValue] = {}
    for key, value in learning.recorded().items():
        if isinstance(value, bool):
            shown[key] = dg.MetadataValue.bool(value)
        elif isinstance(value, float):
            shown[key] = dg.MetadataValue.float(value)
        elif isinstance(value, dict):
            shown[key] = dg.MetadataValue.json(value)
        elif value is not None:
            shown[key] = value
    return shown


def _binds(spec: RunSpec, index: int, sampler: str) -> dict[str, str | dg.MetadataValue]:
    """Where the checkpoint goes next: the policy of the run's next batch, which the policy
    gate binds to it, linked in the UI; the last batch's checkpoint ends the run."""
    if index + 1 < spec.batch_count:
        following = batch_key(spec.run_id, index + 1)
        return {
            "binds": f"policy[{following}]",
            "next_policy": dg.MetadataValue.url(f"/assets/policy?partition={following}"),
        }
    return {"binds": f"nothing in this run (its last batch); `--model {sampler}` starts from it"}


def _curves(engine: Engine, spec: RunSpec, index: int) -> dict[str, dg.MetadataValue]:
    """The run's mean reward and sampler/trainer KL per batch so far, drawn on the page."""
    from synth_pipelines.control.policy_updates import run_updates

    updates = [u for u in run_updates(engine, spec.run_id) if u.batch_index <= index]
    rewards = [u.metrics.reward_mean for u in updates]
    kls = [u.metrics.kl_sample_train_v1 or 0.0 for u in updates]
    return {
        **curve_metadata("reward_curve", rewards, "mean reward, batch", bounded=True),
        **curve_metadata("kl_curve", kls, "KL sample/train v1, batch", bounded=False),
        "reward_mean": dg.MetadataValue.float(rewards[-1] if rewards else 0.0),
    }
