"""The built-in losses of the Tinker API, token-wise, exactly as its documentation defines them.

Every tensor is aligned with the datum's model input: position i carries the target
token i + 1 and its inputs. A loss returns the per-token loss; the datum's loss is
its sum and the batch's loss is the sum over datums (no normalisation). Each loss names
the input that scales it token by token (`scale`): where that input is zero the token's
loss has no gradient, which lets training skip the backward pass there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from synth_pipelines.tinker_local.errors import UserError

Elementwise = Callable[
    [torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, float]], torch.Tensor
]


@dataclass(frozen=True)
class LossFunction:
    name: str
    inputs: tuple[str, ...]
    scale: str
    config_defaults: Mapping[str, float]
    elementwise: Elementwise

    def trained(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The positions whose loss has a gradient."""
        return inputs[self.scale] != 0


def _cross_entropy(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    return -inputs["weights"] * logprobs


def _importance_sampling(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    ratio = torch.exp(logprobs - inputs["logprobs"])
    return -(ratio * inputs["advantages"])


def _ppo(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    ratio = torch.exp(logprobs - inputs["logprobs"])
    clipped = torch.clamp(ratio, config["clip_low_threshold"], config["clip_high_threshold"])
    advantages = inputs["advantages"]
    return -torch.minimum(ratio * advantages, clipped * advantages)


LOSSES: dict[str, LossFunction] = {
    loss.name: loss
    for loss in (
        LossFunction("cross_entropy", ("target_tokens", "weights"), "weights", {}, _cross_entropy),
        LossFunction(
            "importance_sampling",
            ("target_tokens", "logprobs", "advantages"),
            "advantages",
            {},
            _importance_sampling,
        ),
        LossFunction(
            "ppo",
            ("target_tokens", "logprobs", "advantages"),
            "advantages",
            {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
            _ppo,
        ),
    )
}


def resolve_loss(
    name: str, config: Mapping[str, float | str] | None
) -> tuple[LossFunction, dict[str, float]]:
    """The loss and its full config, or a `UserError` naming what to change."""
    loss = LOSSES.get(name)
    if loss is None:
        raise UserError(
            f"unknown loss_fn {name!r}: the local service supports "
            f"{', '.join(sorted(LOSSES))}; custom losses run through forward_backward_custom"
        )
    resolved = dict(loss.config_defaults)
    for key, value in (config or {}).items():
        if key not in loss.config_defaults:
            accepted = ", ".join(loss.config_defaults) or "none"
            raise UserError(
                f"loss_fn_config key {key!r} is not used by {name!r} (accepted keys: {accepted})"
            )
        if isinstance(value, str):
            raise UserError(f"loss_fn_config[{key!r}] must be a number, got {value!r}")
        resolved[key] = float(value)
    if name == "ppo" and resolved["clip_low_threshold"] > resolved["clip_high_threshold"]:
        raise UserError(
            f"ppo clip_low_threshold {resolved['clip_low_threshold']} is above "
            f"clip_high_threshold {resolved['clip_high_threshold']}"
        )
    return loss, resolved
