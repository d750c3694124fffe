"""One training run: a trainable adapter over the shared backbone and its AdamW state.

Gradients add up across forward_backward calls (the SDK splits large batches into
chunks) until optim_step applies them and clears them.

The datums of one call usually open with the same tokens (the system prompt and tool
definitions of every attempt), so that shared prefix is run once: each datum's remaining
tokens attend to its keys and values, and its gradients are gathered from every datum
before flowing back through it. The result equals running every datum in full.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types
from transformers import DynamicCache

from synth_pipelines.tinker_local.backbone import Backbone, layer_states
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


@dataclass(frozen=True)
class _Scored:
    """Per datum, the target logprobs and token losses of some of its positions."""

    logprobs: list[torch.Tensor]
    losses: list[torch.Tensor]

    @property
    def total(self) -> torch.Tensor:
        return torch.stack([value.sum() for value in self.losses]).sum()


class _SharedPrefix:
    """The first `length` tokens of every datum, run once.

    Its hidden states and per-layer keys and values are handed out as leaf tensors, so each
    microbatch's backward pass leaves its share of their gradient there; `backward` then
    sends the sum through the prefix's own graph.
    """

    def __init__(self, decoder: torch.nn.Module, tokens: torch.Tensor, hidden_size: int):
        self.length = int(tokens.shape[0])
        self._outputs: list[torch.Tensor] = []
        if self.length:
            cache = DynamicCache()
            run = decoder(input_ids=tokens[None], past_key_values=cache, use_cache=True)
            self._outputs = [run.last_hidden_state[0]] + [
                tensor for state in layer_states(cache) for tensor in state
            ]
        self._leaves = [
            tensor.detach().requires_grad_(tensor.requires_grad) for tensor in self._outputs
        ]
        self.hidden = self._leaves[0] if self.length else tokens.new_zeros(0, hidden_size).float()

    def cache(self, rows: int) -> DynamicCache | None:
        """The prefix's keys and values for `rows` continuations (views, not copies)."""
        if not self.length:
            return None
        pairs = zip(self._leaves[1::2], self._leaves[2::2], strict=True)
        return DynamicCache(
            ddp_cache_data=[
                (keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1))
                for keys, values in pairs
            ]
        )

    def backward(self) -> None:
        reached = [
            (output, leaf.grad)
            for output, leaf in zip(self._outputs, self._leaves, strict=True)
            if leaf.grad is not None
        ]
        if reached:
            outputs, grads = zip(*reached, strict=True)
            torch.autograd.backward(list(outputs), list(grads))


class TrainingRun:
    def __init__(self, model_id: str, backbone: Backbone, slots: LoraSlots, adapter: Adapter):
        self.model_id = model_id
        self.backbone = backbone
        self.slots = slots
        self.adapter = adapter.trainable()
        self.optimizer = torch.optim.AdamW(self.adapter.parameters())

    @property
    def decoder(self) -> torch.nn.Module:
        decoder: torch.nn.Module = self.backbone.network.get_decoder()
        return decoder

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
        with torch.set_grad_enabled(not forward_only):
            prefix = _SharedPrefix(
                self.decoder,
                datums[0].tokens[: _shared_length(datums)],
                self.backbone.network.config.hidden_size,
            )
            opening = self._score_prefix(prefix, datums, loss, config)
            total = self._backward(opening.total, forward_only)
            for batch in _microbatches(datums, prefix.length):
                rest = self._score_rest(prefix, [datums[i] for i in batch], loss, config)
                total += self._backward(rest.total, forward_only)
                for row, i in enumerate(batch):
                    logprobs[i] = _joined(opening.logprobs[i], rest.logprobs[row])
                    elementwise[i] = _joined(opening.losses[i], rest.losses[row])
            if not forward_only:
                prefix.backward()
        return ForwardBackwardResult(logprobs, elementwise, total)

    @staticmethod
    def _backward(batch_loss: torch.Tensor, forward_only: bool) -> float:
        if not forward_only and batch_loss.requires_grad:
            batch_loss.backward()
        return float(batch_loss.detach())

    def _score_prefix(
        self,
        prefix: _SharedPrefix,
        datums: Sequence[TrainingDatum],
        loss: LossFunction,
        config: Mapping[str, float],
    ) -> _Scored:
        """The prefix positions of every datum: one shared distribution per position,
        each datum's own targets."""
        shown = [_positions(datum, 0, prefix.length) for datum in datums]
        targets = torch.stack([inputs["target_tokens"] for inputs in shown], dim=1)
        trained = torch.stack([loss.trained(inputs) for inputs in shown], dim=1).any(dim=1)
        scored = token_logprobs(
            prefix.hidden,
            self.backbone.network.get_output_embeddings(),
            targets,
            self.backbone.vocab_size,
            trained,
        )
        columns = list(scored.unbind(dim=1))
        return _Scored(
            columns,
            [
                loss.elementwise(column, inputs, config)
                for column, inputs in zip(columns, shown, strict=True)
            ],
        )

    def _score_rest(
        self,
        prefix: _SharedPrefix,
        datums: Sequence[TrainingDatum],
        loss: LossFunction,
        config: Mapping[str, float],
    ) -> _Scored:
        """The positions after the prefix, right-padded: causal attention never looks at
        later padding, so no mask is needed."""
        start = prefix.length
        lengths = [datum.length - start for datum in datums]
        width = max(lengths)
        device = self.backbone.device
        tokens = torch.zeros(len(datums), width, dtype=torch.long, device=device)
        targets = torch.zeros(len(datums), width, dtype=torch.long, device=device)
        trained = torch.zeros(len(datums), width, dtype=torch.bool, device=device)
        shown = [_positions(datum, start, datum.length) for datum in datums]
        for row, (datum, inputs) in enumerate(zip(datums, shown, strict=True)):
            tokens[row, : lengths[row]] = datum.tokens[start:]
            targets[row, : lengths[row]] = inputs["target_tokens"]
            trained[row, : lengths[row]] = loss.trained(inputs)
        hidden = self.decoder(
            input_ids=tokens, past_key_values=prefix.cache(len(datums))
        ).last_hidden_state
        valid = (
            torch.arange(width, device=device)[None, :]
            < torch.tensor(lengths, device=device)[:, None]
        )
        flat = token_logprobs(
            hidden[valid],
            self.backbone.network.get_output_embeddings(),
            targets[valid],
            self.backbone.vocab_size,
            trained[valid],
        )
        per_datum = list(flat.split(lengths))
        return _Scored(
            per_datum,
            [
                loss.elementwise(value, inputs, config)
                for value, inputs in zip(per_datum, shown, strict=True)
            ],
        )

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


def _shared_length(datums: Sequence[TrainingDatum]) -> int:
    """How many leading tokens every datum has in common, leaving each at least one of
    its own."""
    first = datums[0].tokens
    shared = min(datum.length for datum in datums) - 1
    for datum in datums[1:]:
        differs = (datum.tokens[:shared] != first[:shared]).nonzero()
        if differs.numel():
            shared = int(differs[0])
    return shared


def _positions(datum: TrainingDatum, start: int, stop: int) -> dict[str, torch.Tensor]:
    return {name: values[start:stop] for name, values in datum.inputs.items()}


def _joined(opening: torch.Tensor, rest: torch.Tensor) -> np.ndarray:
    return torch.cat([opening, rest]).detach().float().cpu().numpy()


def _microbatches(datums: Sequence[TrainingDatum], skipped: int) -> list[list[int]]:
    """Datums grouped by length after the first `skipped` tokens, so that padding stays
    small and activations bounded."""
    order = sorted(range(len(datums)), key=lambda i: datums[i].length)
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = datums[index].length - skipped
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
