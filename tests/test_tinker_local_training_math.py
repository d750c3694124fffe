"""Loss values, LoRA gradients and Adam steps of the model service against direct torch math."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tinker import types

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local import token_logprobs
from synth_pipelines.tinker_local.backbone import Backbone, load_backbone
from synth_pipelines.tinker_local.datums import training_datums
from synth_pipelines.tinker_local.lora import LoraSlots, LoraSpec
from synth_pipelines.tinker_local.losses import resolve_loss
from synth_pipelines.tinker_local.training import TrainingRun
from synth_pipelines.tinker_local.wire import WireDatum

SPEC = LoraSpec(rank=4)


def assert_close_to_scale(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-4) -> None:
    """Equal up to float32 summation-order noise, measured against the tensor's own scale."""
    scale = float(want.abs().max()) or 1.0
    torch.testing.assert_close(got, want, rtol=rel, atol=rel * scale)


@pytest.fixture(scope="module")
def backbone() -> Backbone:
    return load_backbone(QWEN3_TINY, torch.device("cpu"))


@pytest.fixture(scope="module")
def slots(backbone: Backbone) -> LoraSlots:
    return LoraSlots.install(backbone.network)


def _run(backbone: Backbone, slots: LoraSlots, seed: int = 7) -> TrainingRun:
    """A run whose B factors are non-zero, so every LoRA factor gets a gradient."""
    adapter = slots.new_adapter(SPEC, seed)
    generator = torch.Generator().manual_seed(seed)
    for _, up in adapter.factors.values():
        up.copy_(torch.randn(up.shape, generator=generator) * 0.05)
    return TrainingRun("test:train:0", backbone, slots, adapter)


def _wire_batch(loss_fn: str) -> list[WireDatum]:
    rng = np.random.default_rng(3)
    datums = []
    for length in (7, 12, 4):
        sequence = rng.integers(0, 151_669, size=length + 1)
        inputs: dict[str, np.ndarray] = {"target_tokens": sequence[1:]}
        if loss_fn == "cross_entropy":
            inputs["weights"] = rng.uniform(0, 1, size=length).astype(np.float32)
        else:
            inputs["logprobs"] = rng.uniform(-13, -11, size=length).astype(np.float32)
            inputs["advantages"] = rng.normal(size=length).astype(np.float32)
        datums.append(WireDatum(sequence[:-1], inputs))
    return datums


def _direct_loss(run: TrainingRun, loss_fn: str, batch: list[WireDatum]) -> torch.Tensor:
    """The documented formula over logits from the model's plain forward, one datum at a time."""
    run.slots.attach(run.adapter)
    total = torch.zeros(())
    for datum in batch:
        logits = run.backbone.network(input_ids=torch.tensor(datum.tokens)[None]).logits[0]
        targets = torch.tensor(datum.inputs["target_tokens"])
        logprobs = torch.log_softmax(logits.float(), -1)[torch.arange(len(targets)), targets]
        if loss_fn == "cross_entropy":
            total = total + (-torch.tensor(datum.inputs["weights"]) * logprobs).sum()
            continue
        ratio = torch.exp(logprobs - torch.tensor(datum.inputs["logprobs"]))
        advantages = torch.tensor(datum.inputs["advantages"])
        if loss_fn == "importance_sampling":
            total = total - (ratio * advantages).sum()
        else:
            clipped = torch.clamp(ratio, 0.9, 1.1)
            total = total - torch.minimum(ratio * advantages, clipped * advantages).sum()
    return total


def _service_gradients(
    run: TrainingRun, loss_fn: str, batch: list[WireDatum]
) -> tuple[float, list[torch.Tensor], list[np.ndarray]]:
    config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1} if loss_fn == "ppo" else None
    loss, resolved = resolve_loss(loss_fn, config)
    datums = training_datums(batch, loss, run.backbone.vocab_size, torch.device("cpu"))
    result = run.forward_backward(datums, loss, resolved, forward_only=False)
    grads = [p.grad.clone() for p in run.adapter.parameters()]
    return result.loss_sum, grads, result.logprobs


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling", "ppo"])
def test_loss_and_lora_gradients_equal_direct_torch_computation(
    backbone: Backbone, slots: LoraSlots, loss_fn: str
) -> None:
    batch = _wire_batch(loss_fn)
    run = _run(backbone, slots)
    loss_sum, grads, _ = _service_gradients(run, loss_fn, batch)

    direct = _run(backbone, slots)
    expected = _direct_loss(direct, loss_fn, batch)
    expected.backward()

    assert loss_sum == pytest.approx(float(expected.detach()), rel=1e-5, abs=1e-5)
    for got, want in zip(grads, (p.grad for p in direct.adapter.parameters()), strict=True):
        assert want is not None
        assert_close_to_scale(got, want)
    assert any(float(g.abs().max()) > 0 for g in grads)


def test_chunked_logprobs_give_the_same_gradients_as_one_chunk(
    backbone: Backbone, slots: LoraSlots, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = _wire_batch("cross_entropy")
    whole_loss, whole_grads, whole_logprobs = _service_gradients(
        _run(backbone, slots), "cross_entropy", batch
    )
    monkeypatch.setattr(token_logprobs, "LOGIT_CHUNK_BYTES", 4 * backbone.vocab_size * 5)
    chunked_loss, chunked_grads, chunked_logprobs = _service_gradients(
        _run(backbone, slots), "cross_entropy", batch
    )
    assert chunked_loss == pytest.approx(whole_loss, rel=1e-6)
    for got, want in zip(chunked_logprobs, whole_logprobs, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for got, want in zip(chunked_grads, whole_grads, strict=True):
        assert_close_to_scale(got, want, rel=1e-5)


def test_gradients_accumulate_across_forward_backward_calls(
    backbone: Backbone, slots: LoraSlots
) -> None:
    batch = _wire_batch("cross_entropy")
    _, together, _ = _service_gradients(_run(backbone, slots), "cross_entropy", batch)
    split = _run(backbone, slots)
    _service_gradients(split, "cross_entropy", batch[:1])
    _, accumulated, _ = _service_gradients(split, "cross_entropy", batch[1:])
    for got, want in zip(accumulated, together, strict=True):
        assert_close_to_scale(got, want)


def test_forward_only_leaves_no_gradient(backbone: Backbone, slots: LoraSlots) -> None:
    run = _run(backbone, slots)
    loss, config = resolve_loss("cross_entropy", None)
    datums = training_datums(
        _wire_batch("cross_entropy"), loss, backbone.vocab_size, run.backbone.device
    )
    run.forward_backward(datums, loss, config, forward_only=True)
    assert all(p.grad is None for p in run.adapter.parameters())


def _manual_adamw(
    param: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor], p: types.AdamParams
) -> torch.Tensor:
    step = state["step"] = state.get("step", 0) + 1
    m = state["m"] = p.beta1 * state.get("m", torch.zeros_like(param)) + (1 - p.beta1) * grad
    v = state["v"] = p.beta2 * state.get("v", torch.zeros_like(param)) + (1 - p.beta2) * grad**2
    decayed = param * (1 - p.learning_rate * p.weight_decay)
    m_hat = m / (1 - p.beta1**step)
    v_hat = v / (1 - p.beta2**step)
    return decayed - p.learning_rate * m_hat / (v_hat.sqrt() + p.eps)


@pytest.mark.parametrize("clip", [0.0, 0.5])
def test_optim_step_is_adamw_honoring_every_adam_param(
    backbone: Backbone, slots: LoraSlots, clip: float
) -> None:
    params = types.AdamParams(
        learning_rate=3e-3, beta1=0.8, beta2=0.9, eps=1e-6, weight_decay=0.1, grad_clip_norm=clip
    )
    run = _run(backbone, slots)
    expected = [p.detach().clone() for p in run.adapter.parameters()]
    states: list[dict[str, torch.Tensor]] = [{} for _ in expected]
    for _ in range(2):
        _, grads, _ = _service_gradients(run, "cross_entropy", _wire_batch("cross_entropy"))
        norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
        scale = min(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0
        metrics = run.optim_step(params)
        assert metrics["grad_norm:mean"] == pytest.approx(norm, rel=1e-4)
        expected = [
            _manual_adamw(value, grad * scale, state, params)
            for value, grad, state in zip(expected, grads, states, strict=True)
        ]
    for got, want in zip(run.adapter.parameters(), expected, strict=True):
        assert_close_to_scale(got.detach(), want)


def _shared_prefix_batch(loss_fn: str) -> list[WireDatum]:
    """Attempts of one prompt: a common opening, then each its own tokens, with the loss
    scale zero over the prompt and over part of each completion (as for tool results)."""
    rng = np.random.default_rng(11)
    opening = rng.integers(0, 151_669, size=20)
    datums = []
    for own in (9, 3, 14, 1):
        sequence = np.concatenate([opening, rng.integers(0, 151_669, size=own + 1)])
        length = len(sequence) - 1
        scale = np.zeros(length, dtype=np.float32)
        scale[len(opening) - 1 :] = rng.normal(size=length - len(opening) + 1)
        scale[len(opening) + own // 2 : len(opening) + own // 2 + 2] = 0.0
        inputs: dict[str, np.ndarray] = {"target_tokens": sequence[1:]}
        if loss_fn == "cross_entropy":
            inputs["weights"] = np.abs(scale)
        else:
            inputs["logprobs"] = rng.uniform(-13, -11, size=length).astype(np.float32)
            inputs["advantages"] = scale
        datums.append(WireDatum(sequence[:-1], inputs))
    return datums


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling"])
def test_shared_prefix_and_sparse_gradients_equal_dense_computation(
    backbone: Backbone, slots: LoraSlots, loss_fn: str
) -> None:
    batch = _shared_prefix_batch(loss_fn)
    run = _run(backbone, slots)
    loss_sum, grads, logprobs = _service_gradients(run, loss_fn, batch)

    direct = _run(backbone, slots)
    direct.slots.attach(direct.adapter)
    expected = _direct_loss(direct, loss_fn, batch)
    expected.backward()
    with torch.no_grad():
        for datum, got in zip(batch, logprobs, strict=True):
            logits = backbone.network(input_ids=torch.tensor(datum.tokens)[None]).logits[0]
            targets = torch.tensor(datum.inputs["target_tokens"])
            want = torch.log_softmax(logits.float(), -1)[torch.arange(len(targets)), targets]
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-4)

    assert loss_sum == pytest.approx(float(expected.detach()), rel=1e-5, abs=1e-5)
    for got, want in zip(grads, (p.grad for p in direct.adapter.parameters()), strict=True):
        assert want is not None
        assert_close_to_scale(got, want)
    assert any(float(g.abs().max()) > 0 for g in grads)
