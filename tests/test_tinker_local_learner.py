"""`synth/qwen3-learner`: served and trained by the local model service like any base model,
seeded, and initialised so that a few LoRA steps make it confident where `synth/qwen3-tiny`
stays unsure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tinker
import torch
from tinker import types

from synth_pipelines.rendering.model_names import QWEN3_LEARNER, QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import load_backbone
from synth_pipelines.tinker_local.datums import TrainingDatum
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.lora import LoraSlots, LoraSpec
from synth_pipelines.tinker_local.losses import LOSSES
from synth_pipelines.tinker_local.server import serving
from synth_pipelines.tinker_local.training import TrainingRun

# <|im_start|>user\nWrite the label blue-7<|im_end|>\n<|im_start|>assistant\n, then a reply
# of <tool_call>\n{"name</tool_call><|im_end|>: the last six tokens are the ones trained.
SEQUENCE = [151644, 872, 198, 7985, 279, 2383, 6303, 12, 22, 151645, 198, 151644, 77091, 198]
REPLY = [151657, 198, 4913, 606, 151658, 151645]


def _supervised() -> types.Datum:
    tokens = SEQUENCE + REPLY
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "weights": [0.0] * (len(SEQUENCE) - 1) + [1.0] * len(REPLY),
        },
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tinker.ServiceClient]:
    objects = tmp_path_factory.mktemp("objects")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        with serving(create_app(QWEN3_LEARNER, object_store_url=f"file://{objects}")) as url:
            service_client = tinker.ServiceClient(base_url=url, api_key="tml-local-tests")
            yield service_client
            service_client.close("success").result()


def test_learner_is_served_and_trained_through_the_unmodified_sdk(client: tinker.ServiceClient):
    training = client.create_lora_training_client(QWEN3_LEARNER, rank=8, seed=3).result()
    info = training.get_info()
    assert info.model_data.model_name == QWEN3_LEARNER and info.model_data.arch == "qwen3"
    assert info.is_lora and info.lora_rank == 8
    losses = []
    for _ in range(4):
        backward = training.forward_backward([_supervised()], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=5e-3)).result()
        losses.append(backward.result().metrics["loss:sum"])
    assert losses[-1] < losses[0] / 2, losses
    path = training.save_weights_for_sampler("learner-test").result().path
    sampler = client.create_sampling_client(model_path=path).result()
    prompt = types.ModelInput.from_ints(SEQUENCE)
    sampled = sampler.sample(prompt, 2, types.SamplingParams(max_tokens=6, seed=5)).result()
    for sequence in sampled.sequences:
        assert 0 < len(sequence.tokens) <= 6
        assert sequence.logprobs is not None and len(sequence.logprobs) == len(sequence.tokens)


def test_learner_weights_are_a_function_of_its_seed():
    torch.manual_seed(123)
    first = load_backbone(QWEN3_LEARNER, torch.device("cpu")).network.state_dict()
    torch.manual_seed(456)
    second = load_backbone(QWEN3_LEARNER, torch.device("cpu")).network.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def _reply_logprobs_after_training(base_model: str, steps: int = 10) -> torch.Tensor:
    backbone = load_backbone(base_model, torch.device("cpu"))
    slots = LoraSlots.install(backbone.network)
    run = TrainingRun("test:train:0", backbone, slots, slots.new_adapter(LoraSpec(rank=8), 0))
    tokens = torch.tensor(SEQUENCE + REPLY)
    weights = torch.zeros(len(tokens) - 1)
    weights[-len(REPLY) :] = 1.0
    datum = TrainingDatum(tokens[:-1], {"target_tokens": tokens[1:], "weights": weights})
    loss = LOSSES["cross_entropy"]
    for _ in range(steps):
        run.forward_backward([datum], loss, {}, forward_only=False)
        run.optim_step(types.AdamParams(learning_rate=5e-3))
    scored = run.forward_backward([datum], loss, {}, forward_only=True)
    return torch.from_numpy(scored.logprobs[0][-len(REPLY) :])


def test_a_few_lora_steps_make_the_learner_confident_but_not_the_tiny_model():
    learner = _reply_logprobs_after_training(QWEN3_LEARNER)
    tiny = _reply_logprobs_after_training(QWEN3_TINY)
    assert learner.min() > -0.1, learner
    assert tiny.mean() < -1.0, tiny


def test_unknown_base_model_names_the_seeded_models_and_directories():
    with pytest.raises(UserError, match="synth/qwen3-learner") as raised:
        load_backbone("synth/qwen3-huge", torch.device("cpu"))
    assert "synth/qwen3-tiny" in str(raised.value)
    assert "local Hugging Face model directory" in str(raised.value)
