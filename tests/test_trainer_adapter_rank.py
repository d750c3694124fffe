"""A train plan continues a checkpoint only with the rank of the checkpoint's adapter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker

from synth_pipelines.contracts.learning import PolicyBinding
from synth_pipelines.contracts.plan import TrainPlan
from synth_pipelines.learning.trainer import AdapterRankError, Trainer
from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tinker.ServiceClient]:
    objects: Path = tmp_path_factory.mktemp("objects")
    with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
        client = tinker.ServiceClient(base_url=url, api_key="tml-local-tests")
        try:
            yield client
        finally:
            client.close("success").result()


@pytest.fixture(scope="module")
def rank_4_state(service: tinker.ServiceClient) -> str:
    training = service.create_lora_training_client(base_model=QWEN3_TINY, rank=4, seed=0)
    return training.save_state("rank-4").result().path


def continuing(service: tinker.ServiceClient, state: str, rank: int) -> Trainer:
    binding = PolicyBinding(
        run_id="r-rank",
        batch="r-rank-b0000",
        index=0,
        sampler=QWEN3_TINY,
        base_model=QWEN3_TINY,
        trainer_state=state,
        optimizer_state=False,
        source="checkpoint",
    )
    return Trainer(service, binding, TrainPlan(kind="train", batches=1, lora_rank=rank))


def test_a_plan_naming_another_rank_than_the_checkpoints_is_refused(
    service: tinker.ServiceClient, rank_4_state: str
) -> None:
    with pytest.raises(AdapterRankError, match=r"lora_rank is 16.*rank-4 adapter.*lora_rank 4"):
        asyncio.run(continuing(service, rank_4_state, 16).training_client())


def test_a_plan_naming_the_checkpoints_rank_continues_it(
    service: tinker.ServiceClient, rank_4_state: str
) -> None:
    client = asyncio.run(continuing(service, rank_4_state, 4).training_client())
    assert client.get_info().lora_rank == 4
