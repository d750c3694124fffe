"""Sampler logprobs equal the trainer's forward logprobs for the same tokens and weights.

This is what makes the importance ratio exactly 1 on-policy: the learning record is
the sampler's own tokens and logprobs, and training must score them identically.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tinker
import torch
from tinker import types

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import load_backbone
from synth_pipelines.tinker_local.lora import LoraSlots, LoraSpec
from synth_pipelines.tinker_local.sampling import DecodeParams, SampleJob, Sampler
from synth_pipelines.tinker_local.server import serving

TOLERANCE = 1e-4
PROMPTS = [
    [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198],
    [151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198],
    [9707, 1879],
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tinker.ServiceClient]:
    objects = tmp_path_factory.mktemp("objects")
    with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
        service_client = tinker.ServiceClient(base_url=url, api_key="tml-local-tests")
        yield service_client
        service_client.close("success").result()


@pytest.fixture(scope="module")
def trained(client: tinker.ServiceClient) -> tinker.TrainingClient:
    """A client whose adapter has moved away from zero, so the check covers real LoRA math."""
    training = client.create_lora_training_client(QWEN3_TINY, rank=8, seed=21).result()
    sequence = PROMPTS[1] + [9707, 1879, 151645]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(sequence[:-1]),
        loss_fn_inputs={"target_tokens": sequence[1:], "weights": [1.0] * (len(sequence) - 1)},
    )
    for _ in range(3):
        training.forward_backward([datum], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    return training


def _rollout_datum(prompt: list[int], sequence: types.SampledSequence) -> types.Datum:
    full = prompt + sequence.tokens
    advantages = [0.0] * (len(prompt) - 1) + [1.0] * len(sequence.tokens)
    sampled_logprobs = [0.0] * (len(prompt) - 1) + list(sequence.logprobs or [])
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": sampled_logprobs,
            "advantages": advantages,
        },
    )


def test_sampled_logprobs_equal_forward_logprobs_for_concurrent_requests(
    trained: tinker.TrainingClient,
) -> None:
    sampler = trained.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=12, temperature=1.0, seed=3)
    futures = [sampler.sample(types.ModelInput.from_ints(prompt), 3, params) for prompt in PROMPTS]
    rollouts = [
        (prompt, sequence)
        for prompt, future in zip(PROMPTS, futures, strict=True)
        for sequence in future.result().sequences
    ]
    forward = trained.forward(
        [_rollout_datum(prompt, sequence) for prompt, sequence in rollouts], "importance_sampling"
    ).result()
    worst = 0.0
    for (prompt, sequence), output in zip(rollouts, forward.loss_fn_outputs, strict=True):
        learner = np.asarray(output["logprobs"].tolist())[len(prompt) - 1 :]
        worst = max(worst, float(np.abs(learner - np.asarray(sequence.logprobs)).max()))
    assert worst <= TOLERANCE
    completion_tokens = sum(len(sequence.tokens) for _, sequence in rollouts)
    # importance_sampling's loss is -sum(ratio * advantage); every ratio is 1 on-policy.
    assert forward.metrics["loss:sum"] == pytest.approx(-completion_tokens, abs=1e-3)


def test_left_padded_batch_decoding_matches_a_full_forward() -> None:
    backbone = load_backbone(QWEN3_TINY, torch.device("cpu"))
    slots = LoraSlots.install(backbone.network)
    adapter = slots.new_adapter(LoraSpec(rank=4), seed=5)
    generator = torch.Generator().manual_seed(5)
    for _, up in adapter.factors.values():
        up.copy_(torch.randn(up.shape, generator=generator) * 0.05)
    slots.attach(adapter)
    jobs = [
        SampleJob(tuple(prompt), 2, DecodeParams(max_tokens=10, seed=index))
        for index, prompt in enumerate(PROMPTS)
    ]
    outputs = Sampler(backbone).run(jobs)
    network = backbone.network
    for job, output in zip(jobs, outputs, strict=True):
        for sequence in output.sequences:
            full = torch.tensor(job.prompt + tuple(sequence.tokens))
            with torch.no_grad():
                logits = network(input_ids=full[None]).logits[0].float()
            logprobs = torch.log_softmax(logits, -1)[:-1].gather(1, full[1:, None]).squeeze(1)
            expected = logprobs[len(job.prompt) - 1 :].numpy()
            np.testing.assert_allclose(sequence.logprobs, expected, atol=TOLERANCE)
