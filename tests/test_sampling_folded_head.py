"""Decoding scores the vocabulary through the output layer with the adapter folded in: the same
distribution as the slot's three products, and it follows the attached adapter as it changes."""

from __future__ import annotations

import torch

from synth_pipelines.rendering.model_names import QWEN3_LEARNER
from synth_pipelines.tinker_local.backbone import load_backbone
from synth_pipelines.tinker_local.lora import LoraSlots, LoraSpec
from synth_pipelines.tinker_local.sampling import Sampler
from synth_pipelines.tinker_local.token_logprobs import next_token_logprobs

TOLERANCE = 1e-5


def _moved(adapter, seed: int):
    """An adapter whose factors are away from their zero start, so the fold is not trivial."""
    generator = torch.Generator().manual_seed(seed)
    for down, up in adapter.factors.values():
        up.copy_(torch.randn(up.shape, generator=generator) * 0.05)
        down.copy_(torch.randn(down.shape, generator=generator) * 0.05)
    return adapter


def test_folded_head_matches_the_slot_and_follows_the_attached_adapter():
    backbone = load_backbone(QWEN3_LEARNER)
    slots = LoraSlots.install(backbone.network)
    sampler = Sampler(backbone)
    hidden = torch.randn(
        3, backbone.network.config.hidden_size, generator=torch.Generator().manual_seed(1)
    )
    spec = LoraSpec(rank=16)
    first = _moved(slots.new_adapter(spec, seed=1), 2)
    second = _moved(slots.new_adapter(spec, seed=3), 4)
    with torch.inference_mode():
        for adapter in (None, first, second, first):
            slots.attach(adapter)
            unfolded = next_token_logprobs(sampler.head, hidden)
            assert (sampler.next_logprobs(hidden) - unfolded).abs().max() < TOLERANCE
    # An optimizer step changes the attached factors in place: the fold is rebuilt.
    slots.attach(first)
    before = sampler.next_logprobs(hidden).clone()
    with torch.no_grad():
        for _, up in first.factors.values():
            up.mul_(3.0)
    with torch.inference_mode():
        after = sampler.next_logprobs(hidden)
        unfolded = next_token_logprobs(sampler.head, hidden)
    assert (after - before).abs().max() > 100 * TOLERANCE
    assert (after - unfolded).abs().max() < TOLERANCE
