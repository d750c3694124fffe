"""The prompt's ids reach the tinker SDK's sample request exactly, without a per-id copy."""

from __future__ import annotations

import json

import tinker
from tinker import types
from tinker._compat import model_dump

from proxy.sampler import PromptIds

IDS = [151644, 872, 198, 0, 151645, 2**31 - 1, *range(100, 5000)]


def _request(tokens: list[int]) -> types.SampleRequest:
    return types.SampleRequest(
        sampling_session_id="session",
        seq_id=1,
        num_samples=1,
        prompt=tinker.ModelInput.from_ints(tokens),
        sampling_params=types.SamplingParams(max_tokens=16, stop=[151645]),
    )


def _wire_body(request: types.SampleRequest) -> str:
    # What `AsyncSamplingResource.asample` sends, encoded as httpx encodes JSON bodies.
    body = model_dump(request, exclude_unset=False, exclude_none=True, mode="json")
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def test_sample_request_body_is_the_same_as_for_a_plain_list():
    assert _wire_body(_request(PromptIds(IDS))) == _wire_body(_request(list(IDS)))


def test_sample_request_carries_every_prompt_id_in_order():
    body = json.loads(_wire_body(_request(PromptIds(IDS))))
    (chunk,) = body["prompt"]["chunks"]
    assert chunk["tokens"] == IDS


def test_sdk_keeps_the_prompt_ids_sequence_type():
    # pydantic hands a sequence type it does not map to the JSON encoder whole; a plain list
    # would be serialized id by id in Python.
    (chunk,) = _request(PromptIds(IDS)).prompt.chunks
    assert type(chunk.tokens) is PromptIds
