"""Checkpoints: saved to the object store, restored bit-identically, surviving a restart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import tinker
from tinker import types

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving

SEQUENCE = [151644, 872, 198, 9707, 1879, 11, 1977, 15588, 0, 151645, 198, 151644, 77091]
DATUM = types.Datum(
    model_input=types.ModelInput.from_ints(SEQUENCE[:-1]),
    loss_fn_inputs={"target_tokens": SEQUENCE[1:], "weights": [1.0] * (len(SEQUENCE) - 1)},
)
ADAM = types.AdamParams(learning_rate=1e-2, weight_decay=0.01)


@contextmanager
def service_client(objects: Path) -> Iterator[tinker.ServiceClient]:
    with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
        client = tinker.ServiceClient(base_url=url, api_key="tml-local-tests")
        try:
            yield client
        finally:
            client.close("success").result()


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("objects")


@pytest.fixture(scope="module")
def client(objects: Path) -> Iterator[tinker.ServiceClient]:
    with service_client(objects) as service:
        yield service


def step(training: tinker.TrainingClient) -> float:
    loss = training.forward_backward([DATUM], "cross_entropy")
    training.optim_step(ADAM).result()
    return loss.result().metrics["loss:sum"]


def scores(training: tinker.TrainingClient) -> list[float]:
    return (
        training.forward([DATUM], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    )


def test_training_continued_from_state_with_optimizer_is_bit_identical(
    client: tinker.ServiceClient,
) -> None:
    original = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=1).result()
    step(original)
    state = original.save_state("after-one-step").result().path
    assert state == f"tinker://{original.model_id}/weights/after-one-step"
    step(original)

    resumed = client.create_training_client_from_state_with_optimizer(state).result()
    assert resumed.get_info().lora_rank == 4
    step(resumed)
    assert scores(resumed) == scores(original)

    weights_only = client.create_training_client_from_state(state).result()
    step(weights_only)
    assert scores(weights_only) != scores(original)


def test_checkpoints_survive_a_service_restart(objects: Path, tmp_path: Path) -> None:
    with service_client(objects) as first:
        training = first.create_lora_training_client(QWEN3_TINY, rank=4, seed=2).result()
        step(training)
        state = training.save_state("restart").result().path
        sampler_path = training.save_weights_for_sampler("restart").result().path
        prompt = types.ModelInput.from_ints(SEQUENCE)
        served = first.create_sampling_client(model_path=sampler_path).result()
        logprobs_before = served.compute_logprobs(prompt).result()
        sample_before = served.sample(prompt, 2, types.SamplingParams(max_tokens=6, seed=8))
        tokens_before = [s.tokens for s in sample_before.result().sequences]
        step(training)
        scores_before = scores(training)

    with service_client(objects) as second:
        restored = second.create_sampling_client(model_path=sampler_path).result()
        assert restored.compute_logprobs(prompt).result() == logprobs_before
        sample_after = restored.sample(prompt, 2, types.SamplingParams(max_tokens=6, seed=8))
        assert [s.tokens for s in sample_after.result().sequences] == tokens_before
        resumed = second.create_training_client_from_state_with_optimizer(state).result()
        step(resumed)
        assert scores(resumed) == scores_before


def test_a_taken_checkpoint_name_is_not_overwritten(client: tinker.ServiceClient) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=3).result()
    first = training.save_weights_for_sampler("taken").result().path
    assert training.save_weights_for_sampler("taken").result().path == first
    step(training)
    with pytest.raises(tinker.RequestFailedError, match="already exists"):
        training.save_weights_for_sampler("taken").result()


def test_sampler_weights_cannot_resume_an_optimizer(client: tinker.ServiceClient) -> None:
    training = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=4).result()
    path = training.save_weights_for_sampler("no-optimizer").result().path
    with pytest.raises(tinker.RequestFailedError, match="without optimizer state"):
        client.create_training_client_from_state_with_optimizer(path).result()
    assert client.create_training_client_from_state(path).result().get_info().lora_rank == 4


def test_deprecated_load_state_overwrites_a_live_model(client: tinker.ServiceClient) -> None:
    saved = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=5).result()
    step(saved)
    path = saved.save_state("for-load-state").result().path
    other = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=6).result()
    assert scores(other) != scores(saved)
    with pytest.warns(FutureWarning):
        loading = other.load_state_with_optimizer(path)
    assert loading.result().path == path
    assert scores(other) == scores(saved)
