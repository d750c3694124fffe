"""Training datums decoded from the wire and checked against the loss that will use them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.losses import LossFunction
from synth_pipelines.tinker_local.wire import WireDatum


@dataclass(frozen=True)
class TrainingDatum:
    tokens: torch.Tensor
    inputs: dict[str, torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])


def training_datums(
    data: Sequence[WireDatum], loss: LossFunction, vocab_size: int, device: torch.device
) -> list[TrainingDatum]:
    if not data:
        raise UserError("forward_backward got no datums: send at least one")
    return [_checked(index, datum, loss, vocab_size, device) for index, datum in enumerate(data)]


def _checked(
    index: int, datum: WireDatum, loss: LossFunction, vocab_size: int, device: torch.device
) -> TrainingDatum:
    where = f"datum {index}"
    tokens = datum.tokens
    if tokens.size == 0:
        raise UserError(f"{where}: model_input is empty; give it at least one token")
    _check_token_range(f"{where} model_input", tokens, vocab_size)
    missing = [name for name in loss.inputs if name not in datum.inputs]
    if missing:
        raise UserError(
            f"{where}: loss_fn_inputs lacks {', '.join(repr(m) for m in missing)}, which "
            f"{loss.name!r} needs (it takes {', '.join(loss.inputs)})"
        )
    unexpected = sorted(set(datum.inputs) - set(loss.inputs))
    if unexpected:
        raise UserError(
            f"{where}: loss_fn_inputs {', '.join(repr(u) for u in unexpected)} not used by "
            f"{loss.name!r} (it takes {', '.join(loss.inputs)}); remove them"
        )
    inputs = {}
    for name in loss.inputs:
        array = datum.inputs[name]
        if array.ndim != 1 or array.shape[0] != tokens.size:
            raise UserError(
                f"{where}: loss_fn_inputs[{name!r}] has shape {list(array.shape)} but "
                f"model_input has {tokens.size} tokens; every loss input needs exactly one "
                "entry per input token (shape [N])"
            )
        if name == "target_tokens":
            _check_token_range(f"{where} target_tokens", array, vocab_size)
            inputs[name] = torch.from_numpy(array.astype(np.int64)).to(device)
        else:
            if not np.isfinite(array).all():
                raise UserError(f"{where}: loss_fn_inputs[{name!r}] contains NaN or infinity")
            inputs[name] = torch.from_numpy(array.astype(np.float32)).to(device)
    return TrainingDatum(torch.from_numpy(tokens.astype(np.int64)).to(device), inputs)


def _check_token_range(where: str, tokens: np.ndarray, vocab_size: int) -> None:
    if not np.issubdtype(tokens.dtype, np.integer):
        raise UserError(f"{where} must hold integer token ids, got dtype {tokens.dtype}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise UserError(
            f"{where} holds token id {bad}, outside this model's vocabulary [0, {vocab_size})"
        )
