"""Which sampler a batch is bound to: the policy boundary between batches.

Every attempt of batch k samples through `policy[k]`. For a training run, `policy[k]` for
k > 0 is the checkpoint batch k-1 committed; without it, batch k is not admitted.
"""

from __future__ import annotations

from sqlalchemy import Engine

from synth_pipelines.contracts.learning import PolicyBinding
from synth_pipelines.contracts.plan import TrainPlan, WarmStartPlan
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.checkpoints import batch_checkpoint, find_checkpoint


class PolicyGateError(RuntimeError):
    """A batch whose policy does not exist yet (or that its owner may not use)."""


def effective_model(spec: RunSpec) -> str:
    """The run's model binding; empty for engines that use no model (oracle, nop)."""
    model = spec.actor_model
    if model is None and spec.actor.profile().launched:
        raise PolicyGateError(
            f"run {spec.run_id}: the actor profile binds no model and the run names none"
        )
    return model or ""


def bind_policy(engine: Engine, spec: RunSpec, index: int) -> PolicyBinding:
    key = batch_key(spec.run_id, index)
    training = isinstance(spec.plan, TrainPlan | WarmStartPlan)
    if training and index > 0:
        previous = batch_checkpoint(engine, spec.run_id, index - 1)
        if previous is None:
            raise PolicyGateError(
                f"batch {key} samples through the checkpoint of batch {index - 1}, which is "
                "not committed yet; the batch gate admits it only after that checkpoint"
            )
        return PolicyBinding(
            run_id=spec.run_id,
            batch=key,
            index=index,
            sampler=previous.sampler_path,
            base_model=previous.base_model,
            trainer_state=previous.state_path,
            optimizer_state=True,
            source=f"checkpoint of {previous.batch}",
        )
    model = effective_model(spec)
    if not model.startswith("tinker://"):
        return PolicyBinding(
            run_id=spec.run_id,
            batch=key,
            index=index,
            sampler=model,
            base_model=model,
            trainer_state=None,
            optimizer_state=False,
            source="base model",
        )
    checkpoint = find_checkpoint(engine, model)
    if checkpoint is None:
        raise PolicyGateError(
            f"model {model} is not a known checkpoint; `synth run checkpoints <run>` lists them"
        )
    if checkpoint.owner != spec.owner:
        raise PolicyGateError(
            f"checkpoint {model} belongs to {checkpoint.owner!r}, not to {spec.owner!r}"
        )
    continue_optimizer = isinstance(spec.plan, TrainPlan) and spec.plan.continue_optimizer
    starts_from = "weights and optimizer" if continue_optimizer else "weights"
    return PolicyBinding(
        run_id=spec.run_id,
        batch=key,
        index=index,
        sampler=model,
        base_model=checkpoint.base_model,
        trainer_state=checkpoint.state_path if training else None,
        optimizer_state=continue_optimizer,
        source=f"checkpoint {model} ({starts_from})",
    )
