"""The training side of one batch, through the tinker SDK (local service or Tinker).

Gradients accumulate on the backend across `forward_backward` calls, so a group whose
attempts are all assessed submits its datums while other groups still sample; the
optimizer step comes once, after every group of the batch. Every call is awaited, never
waited on: the batch's event loop keeps running its attempts meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tinker
import torch
from tinker_cookbook.rl.metrics import compute_kl_sample_train

from synth_pipelines.contracts.learning import DatumRow, PolicyBinding
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.learning.datums import training_datum

log = logging.getLogger(__name__)
ADAM_BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8


def adam(learning_rate: float) -> tinker.AdamParams:
    """The optimizer settings of every update the platform applies."""
    return tinker.AdamParams(
        learning_rate=learning_rate, beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1], eps=ADAM_EPS
    )


class AdapterRankError(ValueError):
    """A train plan whose LoRA rank is not that of the checkpoint it continues."""


@dataclass(frozen=True)
class Gradients:
    """What the batch's forward_backward calls report once all are done."""

    datums: int
    action_tokens: int
    loss: float
    kl_sample_train_v1: float
    """At the first forward_backward of the batch: mean over its action tokens of sampler
    logprob minus trainer logprob (tinker-cookbook's `optim/kl_sample_train_v1`)."""
    kl_sample_train_v2: float
    """Half the mean squared difference, at the same place."""
    entropy: float
    """Mean negative sampler logprob of the sampled action tokens (an entropy estimate)."""
    seconds: float


def first_call_agreement(rows: list[DatumRow], learner: list[torch.Tensor]) -> dict[str, float]:
    """Sampler vs trainer on one forward_backward, the way tinker-cookbook logs it."""
    data = [training_datum(row, with_mask=True) for row in rows]
    return compute_kl_sample_train(data, learner)


@dataclass
class Trainer:
    """One batch's training client: created from the binding, fed group by group."""

    service: tinker.ServiceClient
    binding: PolicyBinding
    plan: TrainPlan
    client: tinker.TrainingClient | None = None
    submitted: list[tuple[list[DatumRow], asyncio.Future[tinker.ForwardBackwardOutput]]] = field(
        default_factory=list
    )
    forward_seconds: float = 0.0
    saved_state: str | None = None
    """The trainer state this client saved last: its weights are those of that state."""
    reconnect: Callable[[], tinker.ServiceClient] | None = None
    """A new ServiceClient, for a backend that lost this one's session (the model service
    restarted under the batch): the training client is then made again from durable
    state. None: a failed call fails the batch."""

    async def training_client(self) -> tinker.TrainingClient:
        if self.client is None:
            binding = self.binding
            # The SDK opens its session with the backend on first use, synchronously.
            if binding.trainer_state is None:
                future = await asyncio.to_thread(
                    self.service.create_lora_training_client,
                    base_model=binding.base_model,
                    rank=self.plan.lora_rank,
                    seed=self.plan.seed,
                )
            elif binding.optimizer_state:
                future = await asyncio.to_thread(
                    self.service.create_training_client_from_state_with_optimizer,
                    binding.trainer_state,
                )
            else:
                future = await asyncio.to_thread(
                    self.service.create_training_client_from_state, binding.trainer_state
                )
            client = await future.result_async()
            # A continued adapter keeps the rank it was made with, whatever the plan says; a
            # plan naming another rank would record a recipe that did not run.
            rank = client.get_info().lora_rank
            if binding.trainer_state is not None and rank not in (None, self.plan.lora_rank):
                raise AdapterRankError(
                    f"the plan's lora_rank is {self.plan.lora_rank}, but {binding.trainer_state} "
                    f"holds a rank-{rank} adapter; continue it with lora_rank {rank}"
                )
            self.client = client
        return self.client

    def loss_config(self) -> dict[str, float] | None:
        return (
            {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
            if self.plan.loss == "ppo"
            else None
        )

    async def submit(self, rows: list[DatumRow]) -> None:
        """Send `rows` to forward_backward now; its result is collected by `gradients`."""
        if not rows:
            return
        client = await self.training_client()
        started = time.monotonic()
        future = client.forward_backward(
            [training_datum(row) for row in rows], self.plan.loss, self.loss_config()
        )

        async def result() -> tinker.ForwardBackwardOutput:
            output = await future.result_async()
            self.forward_seconds += time.monotonic() - started
            return output

        self.submitted.append((rows, asyncio.ensure_future(result())))

    def submitted_rows(self) -> list[DatumRow]:
        return [row for rows, _ in self.submitted for row in rows]

    async def gradients(self) -> Gradients:
        """Wait for every submitted forward_backward. If one failed (the backend restarted
        and lost the accumulated gradients, or a call broke), every one is sent again,
        once, to a training client made anew from the binding's durable state: no
        optimizer step was applied yet, so the gradients are the same."""
        try:
            outputs = [await pending for _, pending in self.submitted]
        except (tinker.TinkerError, OSError) as error:
            if self.reconnect is None:
                raise
            log.warning("forward_backward failed (%s); sending the batch's datums again", error)
            await self._start_over()
            outputs = [await pending for _, pending in self.submitted]
        loss, tokens, count = 0.0, 0, 0
        agreement: dict[str, float] = {}
        for (rows, _), output in zip(self.submitted, outputs, strict=True):
            learner = [out["logprobs"].to_torch() for out in output.loss_fn_outputs]
            if not agreement:
                agreement = first_call_agreement(rows, learner)
            loss += float(output.metrics.get("loss:sum", 0.0))
            tokens += sum(int(sum(row.mask)) for row in rows)
            count += len(rows)
        return Gradients(
            datums=count,
            action_tokens=tokens,
            loss=loss,
            kl_sample_train_v1=agreement.get("optim/kl_sample_train_v1", 0.0),
            kl_sample_train_v2=agreement.get("optim/kl_sample_train_v2", 0.0),
            entropy=agreement.get("optim/entropy", 0.0),
            seconds=self.forward_seconds,
        )

    async def _start_over(self) -> None:
        assert self.reconnect is not None
        groups = [rows for rows, _ in self.submitted]
        for _, pending in self.submitted:
            pending.cancel()
        self.submitted, self.forward_seconds = [], 0.0
        self.service = await asyncio.to_thread(self.reconnect)
        self.client = None
        for rows in groups:
            await self.submit(rows)

    async def restore(self, state_path: str, *, reconnect: bool = False) -> None:
        """Continue from a saved trainer state (weights and optimizer), on a new
        ServiceClient with `reconnect`."""
        if reconnect:
            assert self.reconnect is not None
            self.service = await asyncio.to_thread(self.reconnect)
        creating = await asyncio.to_thread(
            self.service.create_training_client_from_state_with_optimizer, state_path
        )
        self.client = await creating.result_async()
        self.saved_state = state_path

    async def optim_step(self) -> dict[str, float]:
        client = await self.training_client()
        response = await client.optim_step(adam(self.plan.learning_rate)).result_async()
        return dict(response.metrics or {})

    async def save_state(self, name: str) -> str:
        client = await self.training_client()
        self.saved_state = (await client.save_state(name).result_async()).path
        return self.saved_state

    async def save_sampler(self, name: str) -> str:
        client = await self.training_client()
        return (await client.save_weights_for_sampler(name).result_async()).path
