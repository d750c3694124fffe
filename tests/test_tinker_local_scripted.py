"""Scripted sampling: given completions, real tokenizer, the real model's logprobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tinker
from fastapi import FastAPI
from tinker import types
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import qwen3_tokenizer_dir
from synth_pipelines.tinker_local.server import serving

IM_END = 151645
TOOL_CALL = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())


@pytest.fixture(scope="module")
def service_app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    objects = tmp_path_factory.mktemp("objects")
    return create_app(QWEN3_TINY, scripted=True, object_store_url=f"file://{objects}")


@pytest.fixture(scope="module")
def service_url(service_app: FastAPI) -> Iterator[str]:
    with serving(service_app) as url:
        yield url


@pytest.fixture(scope="module")
def client(service_url: str) -> Iterator[tinker.ServiceClient]:
    service_client = tinker.ServiceClient(base_url=service_url, api_key="tml-local-tests")
    yield service_client
    service_client.close("success").result()


def put_script(service_url: str, *entries: dict[str, Any]) -> None:
    response = httpx.put(f"{service_url}/scripted/v1/script", json={"entries": list(entries)})
    response.raise_for_status()


def chat_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> types.ModelInput:
    rendered = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return types.ModelInput.from_ints(tokenizer.encode(rendered))


def sample(
    sampler: tinker.SamplingClient, prompt: types.ModelInput, count: int = 1, **params: Any
) -> list[types.SampledSequence]:
    sampling = types.SamplingParams(max_tokens=64, stop=[IM_END], **params)
    return list(sampler.sample(prompt, count, sampling).result().sequences)


def test_completion_is_tokenized_with_special_tokens_and_ends_the_turn(
    client: tinker.ServiceClient, service_url: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    put_script(service_url, {"match": "list the files", "completion": TOOL_CALL})
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    (sequence,) = sample(sampler, chat_prompt(tokenizer, "please list the files"))
    assert sequence.tokens == [*tokenizer.encode(TOOL_CALL), IM_END]
    assert sequence.tokens[0] == tokenizer.convert_tokens_to_ids("<tool_call>")
    assert sequence.stop_reason == "stop"


def test_scripted_logprobs_are_the_models_own_under_current_weights(
    client: tinker.ServiceClient, service_url: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    trainer = client.create_lora_training_client(QWEN3_TINY, rank=4, seed=1).result()
    prompt = chat_prompt(tokenizer, "hello")
    warmup = [*tokenizer.encode("hi there"), IM_END]
    full = prompt.to_ints() + warmup
    trainer.forward_backward(
        [
            types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={"target_tokens": full[1:], "weights": [1.0] * (len(full) - 1)},
            )
        ],
        "cross_entropy",
    )
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    sampler = trainer.save_weights_and_get_sampling_client().result()
    put_script(service_url, {"completion": "Hi! <think>\n\n</think>\n\nsure"})
    (sequence,) = sample(sampler, prompt)
    rollout = prompt.to_ints() + sequence.tokens
    forward = trainer.forward(
        [
            types.Datum(
                model_input=types.ModelInput.from_ints(rollout[:-1]),
                loss_fn_inputs={
                    "target_tokens": rollout[1:],
                    "logprobs": [0.0] * (len(prompt.to_ints()) - 1) + list(sequence.logprobs),
                    "advantages": [0.0] * (len(prompt.to_ints()) - 1)
                    + [1.0] * len(sequence.tokens),
                },
            )
        ],
        "importance_sampling",
    ).result()
    learner = np.asarray(forward.loss_fn_outputs[0]["logprobs"].tolist())
    np.testing.assert_allclose(learner[len(prompt.to_ints()) - 1 :], sequence.logprobs, atol=1e-4)
    assert forward.metrics["loss:sum"] == pytest.approx(-len(sequence.tokens), abs=1e-3)


def test_entries_are_consumed_in_order_and_repeat_entries_stay(
    client: tinker.ServiceClient, service_url: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    put_script(
        service_url,
        {"match": "alpha", "completion": "first"},
        {"match": "alpha", "completion": "second"},
        {"match": None, "completion": "fallback", "repeat": True},
    )
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = chat_prompt(tokenizer, "alpha")

    def texts(count: int) -> list[str]:
        return [
            tokenizer.decode(s.tokens, skip_special_tokens=True)
            for s in sample(sampler, prompt, count)
        ]

    assert texts(2) == ["first", "second"]
    assert texts(2) == ["fallback", "fallback"]
    remaining = httpx.get(f"{service_url}/scripted/v1/script").json()["entries"]
    assert [entry["completion"] for entry in remaining] == ["fallback"]


def test_no_matching_entry_is_a_user_error_naming_the_prompt_tail(
    client: tinker.ServiceClient, service_url: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    put_script(service_url, {"match": "never mentioned", "completion": "x"})
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    future = sampler.sample(
        chat_prompt(tokenizer, "what is the weather"), 1, types.SamplingParams(max_tokens=8)
    )
    with pytest.raises(tinker.RequestFailedError) as caught:
        future.result()
    assert caught.value.category is tinker.types.RequestErrorCategory.User
    assert "no scripted completion left for this prompt" in str(caught.value)
    assert "what is the weather<|im_end|>" in str(caught.value)


def test_max_tokens_cuts_a_scripted_completion(
    client: tinker.ServiceClient, service_url: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    put_script(service_url, {"completion": "one two three four five six"})
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    sequence = (
        sampler.sample(
            chat_prompt(tokenizer, "count"), 1, types.SamplingParams(max_tokens=3, stop=[IM_END])
        )
        .result()
        .sequences[0]
    )
    assert sequence.tokens == tokenizer.encode("one two three four five six")[:3]
    assert sequence.stop_reason == "length"


def test_a_bad_regex_is_refused(service_url: str) -> None:
    response = httpx.put(
        f"{service_url}/scripted/v1/script", json={"entries": [{"match": "(", "completion": "x"}]}
    )
    assert response.status_code == 400
    assert "entry 0: match '(' is not a regex" in response.json()["error"]


def test_the_script_endpoint_exists_only_in_scripted_mode(tmp_path: Path) -> None:
    with serving(create_app(QWEN3_TINY, object_store_url=f"file://{tmp_path}")) as url:
        response = httpx.put(f"{url}/scripted/v1/script", json={"entries": []})
        assert response.status_code == 404


def test_a_constant_logprob_entry_reports_it_for_every_token_without_running_the_model(
    client: tinker.ServiceClient,
    service_url: str,
    service_app: FastAPI,
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    forwards: list[int] = []
    decoder = service_app.state.model_service.models.get(QWEN3_TINY).engine.sampler.decoder
    hook = decoder.register_forward_hook(lambda *_: forwards.append(1))
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    prompt = chat_prompt(tokenizer, "please list the files")
    try:
        put_script(service_url, {"completion": TOOL_CALL, "logprob": -0.25, "repeat": True})
        constant = sample(sampler, prompt, 2)
        forwards_for_constant = len(forwards)
        put_script(service_url, {"completion": TOOL_CALL})
        (scored,) = sample(sampler, prompt)
    finally:
        hook.remove()
    expected = [*tokenizer.encode(TOOL_CALL), IM_END]
    for sequence in constant:
        assert sequence.tokens == expected
        assert sequence.logprobs == [-0.25] * len(expected)
        assert sequence.stop_reason == "stop"
    assert forwards_for_constant == 0
    assert scored.tokens == expected and len(forwards) > 0
    assert scored.logprobs != [-0.25] * len(expected)


def test_a_constant_logprob_entry_refuses_requests_for_prompt_logprobs(
    client: tinker.ServiceClient, service_url: str, tokenizer: PreTrainedTokenizerBase
) -> None:
    put_script(service_url, {"completion": "x", "logprob": -1.0, "repeat": True})
    sampler = client.create_sampling_client(base_model=QWEN3_TINY).result()
    with pytest.raises(tinker.RequestFailedError) as caught:
        sampler.compute_logprobs(chat_prompt(tokenizer, "score me")).result()
    assert caught.value.category is tinker.types.RequestErrorCategory.User
    assert "sets a constant logprob" in str(caught.value)


@pytest.mark.parametrize("logprob", [0.5, "NaN"])
def test_a_constant_logprob_must_be_a_log_probability(service_url: str, logprob: object) -> None:
    response = httpx.put(
        f"{service_url}/scripted/v1/script",
        json={"entries": [{"completion": "x", "logprob": logprob}]},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert f"entry 0: logprob {float(logprob)!r} is not a log-probability" in error
