"""The proxy's sampler outlives a restart of its model service.

A sampling client names a session the service holds in memory; a restarted service (a
teacher stopped and started again between two runs, say) no longer knows it. The sampler
then makes one new client for the route instead of failing every later call on it.
"""

from __future__ import annotations

import asyncio
import os
import socket

import tinker

from proxy.sampler import TinkerSampler
from synth_pipelines.config import Settings
from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.rendering.model_registry import TinkerRoute
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving

PARAMS = tinker.SamplingParams(max_tokens=4, temperature=1.0, seed=3)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_restarted_service_is_sampled_through_a_new_client():
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    port = _free_port()
    route = TinkerRoute(base_model=QWEN3_TINY, service_url=f"http://127.0.0.1:{port}")
    sampler = TinkerSampler(None, "tml-test", timeout_sec=120)
    objects_url = Settings().objects_url

    async def sample_twice() -> list[list[int]]:
        samples = []
        for _ in range(2):
            with serving(create_app(QWEN3_TINY, object_store_url=objects_url), port=port):
                samples.append((await sampler.sample(route, [1, 2, 3], PARAMS)).tokens)
        return samples

    try:
        first, second = asyncio.run(sample_twice())
    finally:
        sampler.close()
    assert len(first) == len(second) == 4
