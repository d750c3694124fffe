"""Bad requests get the SDK's error types with a message saying what to change; serving goes on."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import tinker
from tinker import types
from tinker.types import RequestErrorCategory

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving

TOKENS = [151644, 872, 198, 9707, 1879, 151645]


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    objects = tmp_path_factory.mktemp("objects")
    with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
        yield url


@pytest.fixture(scope="module")
def client(service_url: str) -> Iterator[tinker.ServiceClient]:
    service_client = tinker.ServiceClient(base_url=service_url, api_key="tml-local-tests")
    yield service_client
    service_client.close("success").result()


def training(client: tinker.ServiceClient) -> tinker.TrainingClient:
    """A fresh client per case: the SDK refuses further requests on a client after a failure."""
    return client.create_lora_training_client(QWEN3_TINY, rank=2, seed=0).result()


def datum(**inputs: list[float] | list[int]) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(TOKENS[:-1]), loss_fn_inputs=inputs)


def user_failure(future: tinker.APIFuture) -> str:
    with pytest.raises(tinker.RequestFailedError) as caught:
        future.result()
    assert caught.value.category is RequestErrorCategory.User
    return str(caught.value)


GOOD = {"target_tokens": TOKENS[1:], "weights": [1.0] * 5}


def test_unknown_model_id_is_a_user_error(client: tinker.ServiceClient) -> None:
    info = training(client).get_info()
    stranger = tinker.TrainingClient(
        client.holder, model_seq_id=99, model_id="no-such-session:train:99", info=info
    )
    message = user_failure(stranger.forward_backward([datum(**GOOD)], "cross_entropy"))
    assert "unknown model id 'no-such-session:train:99'" in message


def test_missing_loss_input_names_the_key(client: tinker.ServiceClient) -> None:
    message = user_failure(
        training(client).forward_backward([datum(target_tokens=TOKENS[1:])], "cross_entropy")
    )
    assert "datum 0: loss_fn_inputs lacks 'weights'" in message


def test_target_length_mismatch_names_both_lengths(client: tinker.ServiceClient) -> None:
    bad = datum(target_tokens=TOKENS[1:4], weights=[1.0] * 5)
    message = user_failure(training(client).forward_backward([datum(**GOOD), bad], "cross_entropy"))
    assert "datum 1: loss_fn_inputs['target_tokens'] has shape [3]" in message
    assert "model_input has 5 tokens" in message


def test_unknown_loss_lists_the_supported_ones(client: tinker.ServiceClient) -> None:
    message = user_failure(training(client).forward_backward([datum(**GOOD)], "dpo"))
    assert "unknown loss_fn 'dpo'" in message
    assert "cross_entropy, importance_sampling, ppo" in message


def test_unused_loss_config_key_is_refused(client: tinker.ServiceClient) -> None:
    future = training(client).forward_backward(
        [datum(**GOOD)], "cross_entropy", loss_fn_config={"clip_low_threshold": 0.5}
    )
    assert "'clip_low_threshold' is not used by 'cross_entropy'" in user_failure(future)


def test_token_outside_the_vocabulary_is_refused(client: tinker.ServiceClient) -> None:
    bad = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2, 999_999]),
        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
    )
    message = user_failure(training(client).forward_backward([bad], "cross_entropy"))
    assert "token id 999999, outside this model's vocabulary [0, 151669)" in message


def test_other_base_model_is_refused_with_how_to_serve_it(client: tinker.ServiceClient) -> None:
    with pytest.raises(tinker.RequestFailedError) as caught:
        client.create_lora_training_client("Qwen/Qwen3-8B", rank=2).result()
    assert (
        "serves 'synth/qwen3-tiny', 'synth/qwen3-learner', 'synth/deepseek-tiny', "
        "'synth/kimi-tiny', 'synth/glm-tiny', not 'Qwen/Qwen3-8B'"
    ) in str(caught.value)
    assert "--base-model Qwen/Qwen3-8B" in str(caught.value)


def test_missing_checkpoint_is_reported(client: tinker.ServiceClient) -> None:
    with pytest.raises(tinker.RequestFailedError, match="no checkpoint at tinker://run/weights/x"):
        client.create_training_client_from_state("tinker://run/weights/x").result()
    with pytest.raises(tinker.NotFoundError, match="no checkpoint at"):
        client.create_sampling_client(model_path="tinker://run/sampler_weights/x").result()


def test_max_tokens_beyond_the_context_is_refused(client: tinker.ServiceClient) -> None:
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    future = sampler.sample(
        types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=40_000)
    )
    assert "lower max_tokens to 32762 or less" in user_failure(future)


def test_the_service_keeps_serving_after_bad_requests(client: tinker.ServiceClient) -> None:
    user_failure(training(client).forward_backward([datum(weights=[1.0] * 5)], "ppo"))
    healthy = training(client)
    output = healthy.forward_backward([datum(**GOOD)], "cross_entropy").result()
    assert output.metrics["loss:sum"] > 0
    sampler = healthy.save_weights_and_get_sampling_client().result()
    sample = sampler.sample(
        types.ModelInput.from_ints(TOKENS), 1, types.SamplingParams(max_tokens=3)
    )
    assert len(sample.result().sequences[0].tokens) == 3


def test_request_without_api_key_is_unauthorized(service_url: str) -> None:
    response = httpx.post(f"{service_url}/api/v1/create_session", json={})
    assert response.status_code == 401
    assert "X-API-Key" in response.json()["error"]


def test_forward_backward_body_that_is_not_protobuf_is_a_bad_request(service_url: str) -> None:
    response = httpx.post(
        f"{service_url}/api/v1/forward_backward",
        content=b"\xff\xff\xff",
        headers={"X-API-Key": "tml-local-tests", "Content-Type": "application/x-protobuf"},
    )
    assert response.status_code == 400
    assert "not a tinker_public.ForwardBackwardRequest" in response.json()["error"]


def test_polling_an_unknown_request_is_gone(service_url: str) -> None:
    response = httpx.post(
        f"{service_url}/api/v1/retrieve_future",
        json={"request_id": "req-unknown"},
        headers={"X-API-Key": "tml-local-tests"},
    )
    assert response.status_code == 410
    assert "unknown request req-unknown" in response.json()["error"]


@pytest.mark.parametrize("body", [b'{"request_id": ', b'{"request_id": NaN}'])
def test_body_that_is_not_strict_json_is_a_bad_request(service_url: str, body: bytes) -> None:
    response = httpx.post(
        f"{service_url}/api/v1/retrieve_future",
        content=body,
        headers={"X-API-Key": "tml-local-tests", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert "JSON decode error" in response.json()["error"]
