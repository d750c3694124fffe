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
