"""One training run: a trainable adapter over the shared backbone and its AdamW state.

Gradients add up across forward_backward calls (the SDK splits large batches into
chunks) until optim_step applies them and clears them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types

from synth_pipelines.tinker_local.backbone import Backbone
from synth_pipelines.tinker_local.datums import TrainingDatum
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.lora import Adapter, LoraSlots
from synth_pipelines.tinker_local.losses import LossFunction
from synth_pipelines.tinker_local.token_logprobs import token_logprobs

MICROBATCH_TOKENS = 8192


@dataclass(frozen=True)
class ForwardBackwardResult:
    logprobs: list[np.ndarray]
    elementwise_loss: list[np.ndarray]
    loss_sum: float


class TrainingRun:
    def __init__(self, model_id: str, backbone: Backbone, slots: LoraSlots, adapter: Adapter):
        self.model_id = model_id
        self.backbone = backbone
        self.slots = slots
        self.adapter = adapter.trainable()
        self.optimizer = torch.optim.AdamW(self.adapter.parameters())

    @property
    def decoder(self) -> torch.nn.Module:
        return self.backbone.network.get_decoder()

    def forward_backward(
        self,
        datums: Sequence[TrainingDatum],
        loss: LossFunction,
        config: Mapping[str, float],
        *,
        forward_only: bool,
    ) -> ForwardBackwardResult:
        self.slots.attach(self.adapter)
        logprobs: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(datums)
        elementwise: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(datums)
        total = 0.0
        with torch.set_grad_enabled(not forward_only):
            for batch in _microbatches(datums):
                per_datum_logprobs = self._target_logprobs([datums[i] for i in batch])
                losses = [
                    loss.elementwise(lp, datums[i].inputs, config)
                    for i, lp in zip(batch, per_datum_logprobs, strict=True)
                ]
                batch_loss = torch.stack([value.sum() for value in losses]).sum()
                if not forward_only and batch_loss.requires_grad:
                    batch_loss.backward()
                total += float(batch_loss.detach())
                for i, lp, value in zip(batch, per_datum_logprobs, losses, strict=True):
                    logprobs[i] = lp.detach().float().cpu().numpy()
                    elementwise[i] = value.detach().float().cpu().numpy()
        return ForwardBackwardResult(logprobs, elementwise, total)

    def _target_logprobs(self, datums: Sequence[TrainingDatum]) -> list[torch.Tensor]:
        """Right-padded, so no mask is needed: causal attention never looks at later padding."""
        lengths = [datum.length for datum in datums]
        width = max(lengths)
        device = self.backbone.device
        tokens = torch.zeros(len(datums), width, dtype=torch.long, device=device)
        targets = torch.zeros(len(datums), width, dtype=torch.long, device=device)
        for row, datum in enumerate(datums):
            tokens[row, : datum.length] = datum.tokens
            targets[row, : datum.length] = datum.inputs["target_tokens"]
        hidden = self.decoder(input_ids=tokens).last_hidden_state
        valid = (
            torch.arange(width, device=device)[None, :]
            < torch.tensor(lengths, device=device)[:, None]
        )
        flat = token_logprobs(
            hidden[valid],
            self.backbone.network.get_output_embeddings(),
            targets[valid],
            self.backbone.vocab_size,
        )
        return list(flat.split(lengths))

    def optim_step(self, params: types.AdamParams) -> dict[str, float]:
        _check_adam(params)
        for group in self.optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        parameters = self.adapter.parameters()
        max_norm = params.grad_clip_norm if params.grad_clip_norm > 0 else math.inf
        with_grads = [p for p in parameters if p.grad is not None]
        grad_norm = (
            float(torch.nn.utils.clip_grad_norm_(with_grads, max_norm)) if with_grads else 0.0
        )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm:mean": grad_norm}

    def load(
        self, adapter: Mapping[str, torch.Tensor], optimizer: Mapping[str, torch.Tensor] | None
    ) -> None:
        """Overwrite the adapter (and Adam state, else start it afresh) in place."""
        with torch.no_grad():
            for name, parameter in self.adapter.named_parameters():
                parameter.copy_(adapter[name])
                parameter.grad = None
        self.optimizer.state.clear()
        if optimizer is not None:
            self.restore_optimizer(optimizer)

    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        """Adam moments and step counts, named after the parameter they belong to."""
        tensors = {}
        for name, parameter in self.adapter.named_parameters():
            for key, value in self.optimizer.state.get(parameter, {}).items():
                tensors[f"{name}.{key}"] = torch.as_tensor(value).detach().clone().cpu()
        return tensors

    def restore_optimizer(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for name, parameter in self.adapter.named_parameters():
            state = {
                key.removeprefix(f"{name}."): value.to(parameter.device)
                for key, value in tensors.items()
                if key.startswith(f"{name}.")
            }
            if state:
                state["step"] = state["step"].cpu()
                self.optimizer.state[parameter] = state


def _microbatches(datums: Sequence[TrainingDatum]) -> list[list[int]]:
    """Datums grouped by length so that padding stays small and activations bounded."""
    order = sorted(range(len(datums)), key=lambda i: datums[i].length)
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = datums[index].length
        if current and width * (len(current) + 1) > MICROBATCH_TOKENS:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def _check_adam(params: types.AdamParams) -> None:
    problems = []
    if not params.learning_rate >= 0:
        problems.append(f"learning_rate must be >= 0, got {params.learning_rate}")
    for name in ("beta1", "beta2"):
        value = getattr(params, name)
        if not 0 <= value < 1:
            problems.append(f"{name} must be in [0, 1), got {value}")
    if not params.eps >= 0:
        problems.append(f"eps must be >= 0, got {params.eps}")
    if not params.weight_decay >= 0:
        problems.append(f"weight_decay must be >= 0, got {params.weight_decay}")
    if not params.grad_clip_norm >= 0:
        problems.append(
            f"grad_clip_norm must be >= 0 (0 disables clipping), got {params.grad_clip_norm}"
        )
    if problems:
        raise UserError("invalid AdamParams: " + "; ".join(problems))
