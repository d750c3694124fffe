"""A run's seed makes its sampling repeatable: the same seed and the same place in a run
draw the same tokens, through the real proxy and the real model."""

from __future__ import annotations

import httpx
import pytest

from tests.live_services import MODEL, platform


def _completion(proxy, run: str, seed: int | None) -> str:
    token = proxy.token(run=run, attempt=f"{run}.b0000.g0000.a000", sampling_seed=seed)
    response = httpx.post(
        f"{proxy.url}/v1/messages",
        headers={"x-api-key": token},
        json={
            "model": MODEL,
            "max_tokens": 24,
            "messages": [{"role": "user", "content": "Say something."}],
        },
        timeout=120,
    )
    response.raise_for_status()
    return response.text.split('"content":', 1)[1].split(',"model"', 1)[0]


@pytest.mark.slow
def test_same_seed_and_place_in_a_run_sample_the_same_tokens(state, monkeypatch):
    with platform(monkeypatch, scripted=False) as (_, proxy):
        first = _completion(proxy, "r-first", seed=7)
        again = _completion(proxy, "r-again", seed=7)
        other = _completion(proxy, "r-other", seed=8)
    assert first == again
    assert first != other


def _sampled(proxy, attempt: str, seed: int, temperature: float | None) -> str:
    token = proxy.token(
        run="r-temp", attempt=attempt, sampling_seed=seed, sampling_temperature=temperature
    )
    response = httpx.post(
        f"{proxy.url}/v1/messages",
        headers={"x-api-key": token},
        json={
            "model": MODEL,
            "max_tokens": 16,
            "temperature": 1.0,
            "messages": [{"role": "user", "content": "Say something."}],
        },
        timeout=120,
    )
    response.raise_for_status()
    return response.json()["content"][0]["text"]


@pytest.mark.slow
def test_run_temperature_replaces_the_harness_temperature_and_is_recorded(state, monkeypatch):
    from synth_pipelines.config import Settings
    from synth_pipelines.control.database import control_engine
    from synth_pipelines.evidence.reader import read_attempt_evidence
    from synth_pipelines.storage.objectstore import open_object_store

    with platform(monkeypatch, scripted=False) as (_, proxy):
        # Greedy at the run's temperature 0: different seeds draw the same tokens, although
        # the harness asked for temperature 1.
        greedy = {_sampled(proxy, f"r-temp.b0000.g0000.a00{i}", i, 0.0) for i in range(3)}
        free = {_sampled(proxy, f"r-temp.b0000.g0001.a00{i}", i, None) for i in range(3)}
        proxy.flush()
    assert len(greedy) == 1
    assert len(free) == 3
    calls = read_attempt_evidence(
        control_engine(Settings()),
        open_object_store(Settings().objects_url),
        ["r-temp.b0000.g0000.a000", "r-temp.b0000.g0001.a000"],
    ).calls
    assert [c.temperature for c in calls["r-temp.b0000.g0000.a000"]] == [0.0]
    assert [c.temperature for c in calls["r-temp.b0000.g0001.a000"]] == [1.0]
