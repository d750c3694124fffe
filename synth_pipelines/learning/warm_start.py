"""A warm start: supervised steps on demonstrations through the tinker API, then one
checkpoint that later runs bind like any other.

Nothing is committed before the checkpoint: if the work stops part-way, its optimizer
steps were applied to a training client that nothing refers to, and running it again
starts over from the same model, so no update is ever counted twice.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import tinker
import torch
from sqlalchemy import Engine
from tinker_cookbook.supervised.common import datum_from_model_input_weights

from synth_pipelines.config import Settings
from synth_pipelines.contracts.checkpoint import Checkpoint
from synth_pipelines.contracts.plan import WarmStartPlan
from synth_pipelines.contracts.run_spec import RunSpec, batch_key
from synth_pipelines.control.checkpoints import batch_checkpoint, record_checkpoint
from synth_pipelines.control.worker_claim import WorkerClaim
from synth_pipelines.learning.captured_demonstrations import captured_examples, captured_run
from synth_pipelines.learning.demonstrations import (
    DemonstrationError,
    DemonstrationTurn,
    demonstration_turns,
    harness_frame,
)
from synth_pipelines.learning.policy import bind_policy
from synth_pipelines.learning.teacher import dataset_demonstrations
from synth_pipelines.learning.trainer import adam
from synth_pipelines.registry.datasets import get_dataset
from synth_pipelines.rendering.model_registry import configured_registry
from synth_pipelines.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class WarmStartResult:
    checkpoint: Checkpoint
    losses: list[float]
    """Mean cross-entropy per completion token, one per step."""
    demonstrations: int | None
    """Demonstrations rendered; None when the checkpoint was recorded before (nothing ran)."""
    datums: int | None


def example_datum(tokens: list[int], weights: list[float]) -> tinker.Datum:
    return datum_from_model_input_weights(
        tinker.ModelInput.from_ints(tokens), torch.tensor(weights)
    )


def turn_datum(turn: DemonstrationTurn) -> tinker.Datum:
    """Loss on the completion only: the prompt is what the harness sent."""
    return example_datum(
        turn.prompt + turn.completion, [0.0] * len(turn.prompt) + [1.0] * len(turn.completion)
    )


def demonstration_datums(
    engine: Engine, store: ObjectStore, spec: RunSpec, base_model: str, deployment: Settings
) -> list[list[tinker.Datum]]:
    """Per example (a task's demonstration, or an attempt of the captured run), its turns'
    datums: tasks of the run's dataset in order, up to the plan's limit, rendered with the
    deployment's model registry."""
    assert isinstance(spec.plan, WarmStartPlan)
    registry = configured_registry(deployment)
    if spec.plan.captured_run is not None:
        captured_run(engine, spec.plan.captured_run, spec.actor.digest, spec.owner)
        captured = captured_examples(engine, store, spec.plan.captured_run, registry, base_model)
        # A call of an inference-only route is text evidence: it packs into an example with
        # no tokens, which nothing can learn from.
        learned = [[e for e in examples if e.tokens] for examples in captured]
        if not any(learned):
            raise DemonstrationError(
                f"captured_run {spec.plan.captured_run}: every call was answered by an "
                "inference-only route (text evidence, no token ids): nothing to learn from"
            )
        return [[example_datum(e.tokens, e.weights) for e in ex] for ex in learned if ex]
    frame = harness_frame(spec.actor.profile())
    adapter = registry.get(base_model).adapter()
    demonstrations = dataset_demonstrations(
        engine,
        store,
        get_dataset(engine, spec.dataset.ref),
        "builtin",
        deployment.state_dir / "task-cache",
        spec.task_limit,
    )
    return [
        [turn_datum(turn) for turn in demonstration_turns(adapter, frame, demonstration)]
        for demonstration in demonstrations
    ]


def step_choices(examples: int, plan: WarmStartPlan) -> Iterator[list[int]]:
    """The examples each step learns: passes over all of them, each in a seeded order."""
    rng = random.Random(plan.seed)
    order: list[int] = []
    for _ in range(plan.steps):
        chosen: list[int] = []
        while len(chosen) < min(plan.demonstrations_per_step, examples):
            if not order:
                order = rng.sample(range(examples), examples)
            chosen.append(order.pop())
        yield chosen


class WarmStartStoppedError(RuntimeError):
    """A heartbeat said stop: the run was cancelled, or the claim superseded."""


def warm_start(
    engine: Engine,
    claim: WorkerClaim,
    store: ObjectStore,
    service: tinker.ServiceClient,
    spec: RunSpec,
    deployment: Settings,
    progress: Callable[[int, float], None] = lambda step, loss: None,
) -> WarmStartResult:
    plan = spec.plan
    assert isinstance(plan, WarmStartPlan), f"run {spec.run_id} is not a warm start"
    existing = batch_checkpoint(engine, spec.run_id, 0)
    if existing is not None:
        # Committed by a worker that stopped before it recorded the completion.
        claim.complete(
            spec,
            {"checkpoint": existing.sampler_path, "optimizer_steps": existing.optimizer_steps},
        )
        return WarmStartResult(existing, [], None, None)
    binding = bind_policy(engine, spec, 0)
    per_task = demonstration_datums(engine, store, spec, binding.base_model, deployment)
    claim.append("batch.started", {"batch": batch_key(spec.run_id, 0), "index": 0, "attempts": 0})
    if binding.trainer_state is None:
        client = service.create_lora_training_client(
            base_model=binding.base_model, rank=plan.lora_rank, seed=plan.seed
        ).result()
    else:
        client = service.create_training_client_from_state(binding.trainer_state).result()
    optimizer = adam(plan.learning_rate)
    losses = []
    for step, chosen in enumerate(step_choices(len(per_task), plan)):
        batch = [datum for i in chosen for datum in per_task[i]]
        learned = client.forward_backward(batch, "cross_entropy")
        stepped = client.optim_step(optimizer)
        tokens = sum(float(datum.loss_fn_inputs["weights"].to_torch().sum()) for datum in batch)
        losses.append(float(learned.result().metrics["loss:sum"]) / max(tokens, 1.0))
        stepped.result()
        # A waiting `synth train start --wait` reads its bar from this count.
        claim.append("warm_start.step", {"step": step + 1, "steps": plan.steps, "loss": losses[-1]})
        progress(step + 1, losses[-1])
        # Each step is a heartbeat: it renews the claim, and carries cancellation.
        beat = claim.heartbeat()
        if beat.action != "continue":
            raise WarmStartStoppedError(f"{beat.action}: {beat.reason}")
    name = batch_key(spec.run_id, 0)
    state_path = client.save_state(name).result().path
    checkpoint = record_checkpoint(
        engine,
        Checkpoint(
            sampler_path=client.save_weights_for_sampler(name).result().path,
            run_id=spec.run_id,
            batch=name,
            batch_index=0,
            state_path=state_path,
            base_model=binding.base_model,
            owner=spec.owner,
            dataset_cursor=spec.task_limit,
            optimizer_steps=plan.steps,
            created_at=datetime.now(UTC),
        ),
    )
    claim.complete(
        spec,
        {
            "checkpoint": checkpoint.sampler_path,
            "optimizer_steps": plan.steps,
            "loss_first": losses[0],
            "loss_last": losses[-1],
        },
    )
    return WarmStartResult(checkpoint, losses, len(per_task), sum(map(len, per_task)))
