"""`warm_start[run]`: supervised training on the dataset's demonstrations, ending in the
checkpoint that a train or eval run then binds with `--model`.

The learning code (tinker-cookbook, and torch under it) is imported inside the asset body,
so loading the code location stays fast for every other job."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from assets.curve_metadata import curve_metadata
from assets.partitions import runs
from assets.run_spec import run_spec
from assets.worker_claims import claimed
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from resources.training import TrainingService
from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import WarmStartPlan
from synth_pipelines.control.runs import get_run
from synth_pipelines.control.worker_attempts import StaleWorkerError


@dg.asset(
    partitions_def=runs,
    output_required=False,
    deps=[run_spec],
    group_name="warm_start",
    kinds={"tinker"},
    description="Supervised training of a warm-start run on the dataset's demonstrations: "
    "the checkpoint (sampler and trainer state) that a train or eval run binds with `--model`.",
)
# Dagster takes the result's value type for the output's: Any, as a bare MaterializeResult
# gives (None would make the output Nothing).
def warm_start(
    context: dg.AssetExecutionContext,
    control: ControlDatabase,
    objects: ObjectStoreResource,
    training: TrainingService,
    deployment: dg.ResourceParam[Settings],
) -> Iterator[dg.MaterializeResult[Any]]:
    """Yields nothing when the run cannot claim its one batch."""
    from synth_pipelines.learning.demonstrations import DemonstrationError
    from synth_pipelines.learning.warm_start import WarmStartStoppedError
    from synth_pipelines.learning.warm_start import warm_start as run_warm_start

    engine = control.engine()
    spec = get_run(engine, context.partition_key).spec
    plan = spec.plan
    assert isinstance(plan, WarmStartPlan), f"run {spec.run_id} is not a warm start"
    store = objects.store()
    claim = claimed(context, engine, deployment, spec, 0)
    if claim is None:
        return

    def progress(step: int, loss: float) -> None:
        if step == 1 or step % 10 == 0 or step == plan.steps:
            context.log.info(f"warm start step {step}/{plan.steps}: loss/token {loss:.4f}")

    try:
        result = run_warm_start(
            engine, claim, store, training.service(), spec, deployment, progress
        )
    except StaleWorkerError as refused:
        context.log.warning(f"{refused}; this run stops without writing more")
        return
    except WarmStartStoppedError as stopped:
        claim.release("cancelled", str(stopped))
        raise dg.Failure(description=f"warm start stopped: {stopped}") from None
    except Exception as error:
        claim.release("failed", f"{type(error).__name__}: {error}")
        if isinstance(error, DemonstrationError):
            raise dg.Failure(description=str(error)) from None
        raise
    trained: dict[str, int | dg.MetadataValue | None] = {}
    if result.demonstrations is not None:
        trained = {"demonstrations": result.demonstrations, "datums": result.datums}
    else:
        context.log.info(f"run {spec.run_id} already has its checkpoint: nothing to train")
    if result.losses:
        trained |= {
            **curve_metadata("loss_curve", result.losses, "loss per token, step", bounded=False),
            "loss_first": dg.MetadataValue.float(result.losses[0]),
            "loss_last": dg.MetadataValue.float(result.losses[-1]),
        }
    yield dg.MaterializeResult(
        metadata={
            "sampler": result.checkpoint.sampler_path,
            "state": result.checkpoint.state_path,
            "base_model": result.checkpoint.base_model,
            "optimizer_steps": result.checkpoint.optimizer_steps,
            **trained,
        }
    )
