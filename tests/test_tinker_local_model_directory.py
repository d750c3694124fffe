"""A local Hugging Face model directory serves as the base model, stop tokens included."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
import tinker
import torch
from tinker import types
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import qwen3_tokenizer_dir
from synth_pipelines.tinker_local.server import serving

PROMPT = [151644, 872, 198, 1879, 151645]


@pytest.fixture(scope="module")
def model_directory(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """A small random Qwen3 saved the Hugging Face way; its end-of-turn token is whatever
    it greedily answers PROMPT with, so stopping on it is observable."""
    root = tmp_path_factory.mktemp("hf-model")
    config = Qwen3Config(
        vocab_size=151_669,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    network = Qwen3ForCausalLM(config)
    with torch.no_grad():
        stop_token = int(network(input_ids=torch.tensor([PROMPT])).logits[0, -1].argmax())
    network.save_pretrained(root)
    GenerationConfig(eos_token_id=[stop_token]).save_pretrained(root)
    for file in qwen3_tokenizer_dir().iterdir():
        shutil.copy(file, root / file.name)
    return str(root), stop_token


@pytest.fixture(scope="module")
def client(
    model_directory: tuple[str, int], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tinker.ServiceClient]:
    objects = tmp_path_factory.mktemp("objects")
    with serving(create_app(model_directory[0], object_store_url=f"file://{objects}")) as url:
        service_client = tinker.ServiceClient(base_url=url, api_key="tml-local-tests")
        yield service_client
        service_client.close("success").result()


def test_a_model_directory_trains_and_samples_with_its_own_stop_token(
    client: tinker.ServiceClient, model_directory: tuple[str, int]
) -> None:
    path, stop_token = model_directory
    sampler = client.create_sampling_client(base_model=path).result()
    sequence = (
        sampler.sample(
            types.ModelInput.from_ints(PROMPT),
            1,
            types.SamplingParams(max_tokens=20, temperature=0),
        )
        .result()
        .sequences[0]
    )
    assert sequence.tokens == [stop_token]
    assert sequence.stop_reason == "stop"

    training = client.create_lora_training_client(path, rank=2, seed=0).result()
    info = training.get_info()
    assert info.model_data.model_name == path
    assert info.model_data.tokenizer_id == path
    assert training.get_tokenizer().encode("Hello world") == [9707, 1879]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT[:-1]),
        loss_fn_inputs={"target_tokens": PROMPT[1:], "weights": [1.0] * 4},
    )
    first = training.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    second = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert second < first
