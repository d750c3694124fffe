"""The training side of one batch, through the tinker SDK (local service or Tinker).

Gradients accumulate on the backend across `forward_backward` calls, so a group whose
attempts are all assessed submits its datums while other groups still sample; the
optimizer step comes once, after every group of the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import tinker

from synth_pipelines.contracts.learning import DatumRow, PolicyBinding
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.learning.datums import training_datum

ADAM_BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8


def adam(learning_rate: float) -> tinker.AdamParams:
    """The optimizer settings of every update the platform applies."""
    return tinker.AdamParams(
        learning_rate=learning_rate, beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1], eps=ADAM_EPS
    )


@dataclass
class GradientSummary:
    datums: int
    loss: float
    action_tokens: int
    max_ratio_deviation: float

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def ratio_deviation(rows: list[DatumRow], learner_logprobs: list[list[float]]) -> float:
    """max |exp(learner - sampler) - 1| over action tokens: 0 when exactly on policy."""
    worst = 0.0
    for row, learner in zip(rows, learner_logprobs, strict=True):
        for mask, sampled, learned in zip(row.mask, row.logprobs, learner, strict=True):
            if mask > 0:
                worst = max(worst, abs(math.exp(learned - sampled) - 1.0))
    return worst


@dataclass
class BatchUpdate:
    service: tinker.ServiceClient
    binding: PolicyBinding
    plan: TrainPlan
    client: tinker.TrainingClient | None = None
    submitted: list[tuple[list[DatumRow], object]] = field(default_factory=list)

    async def training_client(self) -> tinker.TrainingClient:
        if self.client is None:
            binding = self.binding
            if binding.trainer_state is None:
                future = self.service.create_lora_training_client(
                    base_model=binding.base_model, rank=self.plan.lora_rank, seed=self.plan.seed
                )
            elif binding.optimizer_state:
                future = self.service.create_training_client_from_state_with_optimizer(
                    binding.trainer_state
                )
            else:
                future = self.service.create_training_client_from_state(binding.trainer_state)
            self.client = await future
        return self.client

    def loss_config(self) -> dict[str, float] | None:
        return (
            {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
            if self.plan.loss == "ppo"
            else None
        )

    async def submit(self, rows: list[DatumRow]) -> None:
        if not rows:
            return
        client = await self.training_client()
        future = client.forward_backward(
            [training_datum(row) for row in rows], self.plan.loss, self.loss_config()
        )
        self.submitted.append((rows, future))

    def submitted_rows(self) -> list[DatumRow]:
        return [row for rows, _ in self.submitted for row in rows]

    def gradients(self) -> GradientSummary:
        """Wait for every submitted forward_backward; report the loss and on-policy ratio."""
        loss, tokens, deviation, count = 0.0, 0, 0.0, 0
        for rows, future in self.submitted:
            output = future.result()
            learner = [out["logprobs"].tolist() for out in output.loss_fn_outputs]
            deviation = max(deviation, ratio_deviation(rows, learner))
            loss += float(output.metrics.get("loss:sum", 0.0))
            tokens += sum(int(sum(row.mask)) for row in rows)
            count += len(rows)
        return GradientSummary(count, loss, tokens, deviation)

    def optim_step(self) -> dict[str, float]:
        assert self.client is not None
        response = self.client.optim_step(adam(self.plan.learning_rate)).result()
        return dict(response.metrics or {})

    def save_state(self, name: str) -> str:
        assert self.client is not None
        return self.client.save_state(name).result().path

    def save_sampler(self, name: str) -> str:
        assert self.client is not None
        return self.client.save_weights_for_sampler(name).result().path
