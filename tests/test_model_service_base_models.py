"""One model service serves several base models: each loaded on first use, within a bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tinker
from tinker import types

from synth_pipelines.rendering.model_names import QWEN3_LEARNER, QWEN3_TINY, SEEDED_MODEL_NAMES
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import SEEDED_MODELS
from synth_pipelines.tinker_local.server import serving

PROMPT = [9707, 11, 1879, 0]


def _supervised() -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(PROMPT[:-1]),
        loss_fn_inputs={"target_tokens": PROMPT[1:], "weights": [0.0, 1.0, 1.0]},
    )


@pytest.fixture
def service_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    with serving(create_app(QWEN3_LEARNER, object_store_url=f"file://{tmp_path}")) as url:
        yield url


def test_every_seeded_model_is_named_where_importing_torch_is_not_needed() -> None:
    assert tuple(SEEDED_MODELS) == SEEDED_MODEL_NAMES


def test_two_base_models_train_and_sample_in_one_process(service_url: str) -> None:
    capabilities = httpx.get(
        f"{service_url}/api/v1/get_server_capabilities", headers={"X-API-Key": "tml-test"}
    ).json()
    served = {entry["model_name"]: entry for entry in capabilities["supported_models"]}
    assert set(served) == set(SEEDED_MODEL_NAMES)
    assert all(entry["trainable"] and entry["sampleable"] for entry in served.values())
    # The learner is loaded at start, every other seeded model only once something asks for it.
    assert served[QWEN3_LEARNER]["max_context_length"] == 32768
    assert all(
        entry["max_context_length"] is None
        for name, entry in served.items()
        if name != QWEN3_LEARNER
    )

    client = tinker.ServiceClient(base_url=service_url, api_key="tml-test")
    try:
        for name in (QWEN3_TINY, QWEN3_LEARNER):
            training = client.create_lora_training_client(name, rank=2, seed=1).result()
            assert training.get_info().model_data.model_name == name
            before = training.forward_backward([_supervised()], "cross_entropy").result()
            training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            after = training.forward_backward([_supervised()], "cross_entropy").result()
            assert after.metrics["loss:sum"] < before.metrics["loss:sum"]
            path = training.save_weights_for_sampler(f"{name.split('/')[-1]}-one").result().path
            sampler = client.create_sampling_client(model_path=path).result()
            sample = sampler.sample(
                types.ModelInput.from_ints(PROMPT), 1, types.SamplingParams(max_tokens=3, seed=2)
            ).result()
            assert len(sample.sequences[0].tokens) == 3
            base = client.create_sampling_client(base_model=name).result()
            assert base.get_base_model() == name
            # The checkpoint's base model is the one it was trained on.
            state = training.save_state(f"{name.split('/')[-1]}-state").result().path
            restored = client.create_training_client_from_state(state).result()
            assert restored.get_info().model_data.model_name == name
    finally:
        client.close("success").result()


def test_a_model_past_the_bound_waits_for_the_one_in_use_to_be_released(tmp_path: Path) -> None:
    with serving(
        create_app(QWEN3_TINY, object_store_url=f"file://{tmp_path}", max_loaded=1)
    ) as url:
        first = tinker.ServiceClient(base_url=url, api_key="tml-test")
        first.create_lora_training_client(QWEN3_TINY, rank=2).result()
        with pytest.raises(tinker.RequestFailedError, match="holds 1 base models in use"):
            first.create_lora_training_client(QWEN3_LEARNER, rank=2).result()
        first.close("success").result()
        second = tinker.ServiceClient(base_url=url, api_key="tml-test")
        try:
            learner = second.create_lora_training_client(QWEN3_LEARNER, rank=2).result()
            assert learner.get_info().model_data.model_name == QWEN3_LEARNER
        finally:
            second.close("success").result()
