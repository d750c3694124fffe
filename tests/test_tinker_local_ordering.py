"""Operations on one model apply in seq_id order, whatever order they arrive in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import tinker
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.proto.response_conv import deserialize_forward_backward_output

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.ordering import SequencedQueue
from synth_pipelines.tinker_local.server import serving

HEADERS = {"X-API-Key": "tml-local-tests"}
TOKENS = [151644, 872, 198, 9707, 1879, 151645]
DATUM = types.Datum(
    model_input=types.ModelInput.from_ints(TOKENS[:-1]),
    loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * 5},
)


def test_queue_releases_in_seq_order_and_refuses_reused_seq_ids() -> None:
    released: list[int] = []
    queue = SequencedQueue("m:train:0")
    for seq_id in (3, 2, 5, 1, 4):
        queue.submit(seq_id, lambda seq_id=seq_id: released.append(seq_id))
    assert released == [1, 2, 3, 4, 5]
    with pytest.raises(UserError, match="seq_id 2 was already used"):
        queue.submit(2, lambda: None)


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    objects = tmp_path_factory.mktemp("objects")
    with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
        yield url


def fwdbwd_body(model_id: str, seq_id: int, forward_only: bool = False) -> bytes:
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[DATUM], loss_fn="cross_entropy"),
        model_id=model_id,
        seq_id=seq_id,
    )
    message = forward_backward_request_to_proto(request)
    message.forward_only = forward_only
    return message.SerializeToString()


def post_fwdbwd(http: httpx.Client, body: bytes) -> str:
    response = http.post(
        "/api/v1/forward_backward",
        content=body,
        headers={"Content-Type": "application/x-protobuf"},
    )
    response.raise_for_status()
    return response.json()["request_id"]


def result(http: httpx.Client, request_id: str) -> Any:
    while True:
        response = http.post("/api/v1/retrieve_future", json={"request_id": request_id}, timeout=60)
        response.raise_for_status()
        if response.headers["content-type"] == "application/x-protobuf":
            return deserialize_forward_backward_output(response.content)
        if response.json().get("type") != "try_again":
            return response.json()


def test_an_optim_step_sent_before_its_forward_backward_still_runs_after_it(
    service_url: str,
) -> None:
    client = tinker.ServiceClient(base_url=service_url, api_key="tml-local-tests")
    model_id = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=0).result().model_id
    with httpx.Client(base_url=service_url, headers=HEADERS) as http:
        before = result(http, post_fwdbwd(http, fwdbwd_body(model_id, 1, forward_only=True)))
        optim = http.post(
            "/api/v1/optim_step",
            json={"model_id": model_id, "seq_id": 3, "adam_params": {"learning_rate": 0.01}},
        ).json()["request_id"]
        gradients = post_fwdbwd(http, fwdbwd_body(model_id, 2))
        after = post_fwdbwd(http, fwdbwd_body(model_id, 4, forward_only=True))
        assert result(http, gradients).metrics["loss:sum"] == before.metrics["loss:sum"]
        assert result(http, optim)["metrics"]["grad_norm:mean"] > 0
        assert result(http, after).metrics["loss:sum"] < before.metrics["loss:sum"]
    client.close("success").result()
