"""The unmodified tinker SDK against the local model service, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tinker
import torch
from tinker import types

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.registry import SNAPSHOTS_KEPT_PER_MODEL
from synth_pipelines.tinker_local.server import serving

TEXT = "The local model service speaks the Tinker wire protocol to the unmodified SDK."


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    objects = tmp_path_factory.mktemp("objects")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
            yield url


@pytest.fixture(scope="module")
def client(service_url: str) -> Iterator[tinker.ServiceClient]:
    service_client = tinker.ServiceClient(base_url=service_url, api_key="tml-local-tests")
    yield service_client
    service_client.close("success").result()


@pytest.fixture(scope="module")
def tokens(client: tinker.ServiceClient) -> list[int]:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=0).result()
    return training.get_tokenizer().encode(TEXT)


def _supervised(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def test_lora_training_client_reports_its_model_and_loads_the_tokenizer_offline(
    client: tinker.ServiceClient,
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=8, seed=1).result()
    info = training.get_info()
    session_id, kind, number = training.model_id.rsplit(":", 2)
    assert (kind, number.isdigit(), bool(session_id)) == ("train", True, True)
    assert info.is_lora and info.lora_rank == 8
    assert info.model_data.model_name == QWEN3_TINY and info.model_data.arch == "qwen3"
    tokenizer = training.get_tokenizer()
    assert len(tokenizer) == 151_669
    assert tokenizer.encode("Hello world") == [9707, 1879]


def test_forward_backward_then_optim_step_lowers_the_loss(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=2).result()
    datum = _supervised(tokens)
    losses = []
    for _ in range(4):
        step = training.forward_backward([datum], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=5e-3))
        output = step.result()
        losses.append(output.metrics["loss:sum"])
        assert output.loss_fn_outputs[0]["logprobs"].shape == [len(tokens) - 1]
    assert losses[-1] < losses[0] - 1.0


def test_sample_returns_tokens_logprobs_and_one_sequence_id_per_sample(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    result = sampler.sample(
        types.ModelInput.from_ints(tokens[:6]), 3, types.SamplingParams(max_tokens=5, seed=11)
    ).result()
    assert len(result.sequences) == 3
    assert len({sequence.sequence_id for sequence in result.sequences}) == 3
    for sequence in result.sequences:
        assert sequence.stop_reason == "length"
        assert len(sequence.tokens) == len(sequence.logprobs) == 5
        assert all(0 <= token < 151_669 for token in sequence.tokens)
        assert all(logprob < 0 for logprob in sequence.logprobs)


def test_seeded_sampling_is_reproducible_and_seeds_differ(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = types.ModelInput.from_ints(tokens[:6])

    def draw(seed: int) -> list[list[int]]:
        params = types.SamplingParams(max_tokens=6, seed=seed)
        return [s.tokens for s in sampler.sample(prompt, 2, params).result().sequences]

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_stop_token_ends_the_sequence(client: tinker.ServiceClient, tokens: list[int]) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = types.ModelInput.from_ints(tokens[:6])
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=4, temperature=0)).result()
    first = greedy.sequences[0].tokens
    stop = first[1]
    stopped = sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=4, temperature=0, stop=[stop])
    ).result()
    assert stopped.sequences[0].tokens == first[: first.index(stop) + 1]
    assert stopped.sequences[0].stop_reason == "stop"


def test_stop_string_ends_the_sequence_after_the_token_that_completes_it(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=3).result()
    tokenizer = training.get_tokenizer()
    prompt = types.ModelInput.from_ints(tokens[:6])
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=0)).result()
    generated = greedy.sequences[0].tokens
    stop_text = tokenizer.decode(generated[2:3])
    stopped = sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=6, temperature=0, stop=[stop_text])
    ).result()
    sequence = stopped.sequences[0]
    assert sequence.stop_reason == "stop"
    assert stop_text in tokenizer.decode(sequence.tokens)
    assert sequence.tokens == generated[: len(sequence.tokens)]
    assert len(sequence.tokens) <= 3


def test_top_k_one_is_greedy(client: tinker.ServiceClient, tokens: list[int]) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = types.ModelInput.from_ints(tokens[:6])
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=5, temperature=0)).result()
    top_one = sampler.sample(
        prompt, 2, types.SamplingParams(max_tokens=5, top_k=1, temperature=1.3, seed=4)
    ).result()
    assert all(s.tokens == greedy.sequences[0].tokens for s in top_one.sequences)


def test_tiny_top_p_is_greedy(client: tinker.ServiceClient, tokens: list[int]) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = types.ModelInput.from_ints(tokens[:6])
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=5, temperature=0)).result()
    nucleus = sampler.sample(
        prompt, 2, types.SamplingParams(max_tokens=5, top_p=1e-6, seed=9)
    ).result()
    assert all(s.tokens == greedy.sequences[0].tokens for s in nucleus.sequences)


def test_compute_logprobs_equals_the_training_forward(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=4).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt_logprobs = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
    forward = training.forward([_supervised(tokens)], "cross_entropy").result()
    assert prompt_logprobs[0] is None
    np.testing.assert_allclose(
        prompt_logprobs[1:], forward.loss_fn_outputs[0]["logprobs"].tolist(), atol=1e-4
    )


def test_save_weights_for_sampler_serves_the_trained_weights(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=5).result()
    datum = _supervised(tokens)
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = training.save_weights_for_sampler("after-one-step").result().path
    assert path == f"tinker://{training.model_id}/sampler_weights/after-one-step"
    saved = client.create_sampling_client(model_path=path).result()
    ephemeral = training.save_weights_and_get_sampling_client().result()
    base = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = types.ModelInput.from_ints(tokens)

    def scores(sampler: tinker.SamplingClient) -> list[float]:
        return sampler.compute_logprobs(prompt).result()[1:]

    assert scores(saved) == scores(ephemeral)
    assert scores(saved) != scores(base)
    assert saved.get_base_model() == QWEN3_TINY


def test_optim_step_without_gradients_keeps_the_weights(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=6).result()
    before = training.forward([_supervised(tokens)], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = training.forward([_supervised(tokens)], "cross_entropy").result()
    assert before.metrics["loss:sum"] == after.metrics["loss:sum"]


def test_the_service_client_closes_its_session(service_url: str, tmp_path: Path) -> None:
    short_lived = tinker.ServiceClient(base_url=service_url, api_key="tml-local-tests")
    training = short_lived.create_lora_training_client(QWEN3_TINY, rank=2).result()
    assert training.model_id
    short_lived.close("success").result()


def test_custom_loss_runs_through_the_cross_entropy_backward(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=7).result()
    datum = _supervised(tokens)
    plain = training.forward([datum], "cross_entropy").result()
    expected = float(np.square(plain.loss_fn_outputs[0]["logprobs"].tolist()).sum())

    def squared(data: list[types.Datum], logprobs: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
        loss = sum((lp**2).sum() for lp in logprobs)
        return loss, {"squared:sum": float(loss.detach())}

    output = training.forward_backward_custom([datum], squared).result()
    assert output.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = training.forward([datum], "cross_entropy").result()
    assert after.metrics["loss:sum"] != plain.metrics["loss:sum"]


def test_only_the_newest_snapshots_stay_sampleable(
    client: tinker.ServiceClient, tokens: list[int]
) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=1, seed=8).result()
    snapshots = [
        training.save_weights_and_get_sampling_client().result()
        for _ in range(SNAPSHOTS_KEPT_PER_MODEL + 1)
    ]
    prompt = types.ModelInput.from_ints(tokens[:4])
    params = types.SamplingParams(max_tokens=1)
    with pytest.raises(tinker.RequestFailedError, match="unknown sampling session"):
        snapshots[0].sample(prompt, 1, params).result()
    assert len(snapshots[-1].sample(prompt, 1, params).result().sequences) == 1
