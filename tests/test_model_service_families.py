"""A seeded model per family: the family's own tokenizer, sampled and re-scored exactly.

Each family's tiny model is served by one model service; a prompt rendered by the family's
proxy adapter is sampled through the tinker SDK, the sampled ids parse with that adapter,
and scoring prompt + completion gives back the sampling logprobs to within 1e-4.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tinker
import torch
from tinker import types

from synth_pipelines.contracts.messages import MessagesRequest
from synth_pipelines.rendering.adapters import adapter_for
from synth_pipelines.rendering.model_names import FAMILY_TINY_MODELS, QWEN3_TINY
from synth_pipelines.rendering.model_registry import ModelRegistry
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import load_backbone
from synth_pipelines.tinker_local.server import serving

FAMILIES = {"qwen": QWEN3_TINY, **FAMILY_TINY_MODELS}
REQUEST = MessagesRequest.model_validate(
    {
        "model": "m",
        "max_tokens": 16,
        "system": "You are terse.",
        "thinking": {"type": "adaptive"},
        "tools": [
            {
                "name": "Bash",
                "description": "Run a shell command",
                "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        ],
        "messages": [{"role": "user", "content": "Create made-by-claude.txt containing hi."}],
    }
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tinker.ServiceClient]:
    store = tmp_path_factory.mktemp("checkpoints")
    app = create_app(QWEN3_TINY, object_store_url=f"file://{store}", max_loaded=len(FAMILIES))
    with serving(app) as url:
        service = tinker.ServiceClient(base_url=url, api_key="tml-test")
        yield service
        service.close("success").result()


def test_each_family_model_is_registered_on_the_local_service() -> None:
    registry = ModelRegistry()
    for family, model in FAMILIES.items():
        entry = registry.get(model)
        assert (entry.family, entry.service_base_model, entry.trainable) == (family, model, True)


@pytest.mark.parametrize("family", sorted(FAMILY_TINY_MODELS))
def test_family_model_tokenizes_with_the_family_adapter(family: str) -> None:
    backbone = load_backbone(FAMILY_TINY_MODELS[family], torch.device("cpu"))
    adapter = adapter_for(family)  # type: ignore[arg-type]
    rendered = adapter.render(REQUEST)
    assert type(backbone.tokenizer.native) is type(adapter._tokenizer)
    # Every id the family renders is inside the model's vocabulary; a scripted answer that
    # spells the family's special tokens gets their ids.
    assert backbone.vocab_size == len(backbone.tokenizer) > max(rendered.tokens)
    for special in (*rendered.stop_token_ids, *rendered.tokens[-2:]):
        assert backbone.tokenizer.encode(backbone.tokenizer.decode([special])) == [special]
    assert backbone.stop_token_ids == rendered.stop_token_ids[: len(backbone.stop_token_ids)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_model_samples_and_rescores_its_own_logprobs(
    client: tinker.ServiceClient, family: str
) -> None:
    adapter = adapter_for(family)  # type: ignore[arg-type]
    rendered = adapter.render(REQUEST)
    sampler = client.create_sampling_client(base_model=FAMILIES[family]).result()
    params = types.SamplingParams(max_tokens=12, seed=7, stop=list(rendered.stop_token_ids))
    (sequence,) = sampler.sample(rendered.model_input(), 1, params).result().sequences
    assert sequence.tokens and sequence.logprobs is not None
    parsed = adapter.parse(rendered, sequence.tokens, sequence.stop_reason)
    assert parsed.output_tokens == len(sequence.tokens)
    scored = sampler.compute_logprobs(
        types.ModelInput.from_ints(rendered.tokens + list(sequence.tokens))
    ).result()
    recomputed = scored[len(rendered.tokens) :]
    assert max(abs(a - b) for a, b in zip(recomputed, sequence.logprobs, strict=True)) < 1e-4
