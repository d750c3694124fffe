"""32 agents at once, each its own session streaming a multi-turn conversation through the
real proxy (its own process, two render workers) to the scripted model service: every call
answers, and the published evidence holds each call exactly once, checksummed and aligned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.proxy import Sessions, Size, percentile
from benchmarks.proxy_clients import STOP_TOKEN, StreamingClient, Timing
from benchmarks.proxy_evidence import OurEvidence
from benchmarks.proxy_processes import (
    COMPLETION_LOGPROB,
    MODEL,
    Server,
    start_backend,
    start_ours,
)
from synth_pipelines.control.database import engine_for
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store

AGENTS = 32
CONVERSATION = [Size("first request", None), *(Size(f"+{turn} turns", turn) for turn in range(3))]
"""Claude Code's first request, then the same session grown by one tool turn per call."""
MIN_IN_FLIGHT = 8
"""Calls the proxy must keep in flight on average: with 32 agents, a proxy that served
calls one at a time (or a few) fails this however fast or slow the host is."""


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Server, OurEvidence]]:
    backend = start_backend(tmp_path)
    try:
        ours = start_ours(tmp_path, backend, workers=2)
        try:
            yield ours, OurEvidence(tmp_path / "ours", ours.url, MODEL)
        finally:
            ours.stop()
    finally:
        backend.stop()


def _agent(url: str, headers: dict[str, str], bodies: list[bytes]) -> list[Timing]:
    """One agent's conversation, call after call on one connection."""
    client = StreamingClient(url)
    try:
        return [client.call((body, headers)) for body in bodies]
    finally:
        client.close()


@pytest.mark.slow
def test_32_concurrent_streaming_agents_lose_and_duplicate_no_evidence(proxy):
    server, evidence = proxy
    sessions = Sessions(evidence)
    bodies = [size.body() for size in CONVERSATION]
    agents = [sessions.new() for _ in range(AGENTS)]

    started = time.perf_counter()
    with ThreadPoolExecutor(AGENTS) as pool:
        conversations = list(pool.map(lambda h: _agent(server.url, h, bodies), agents))
    wall_ms = (time.perf_counter() - started) * 1e3

    attempts = [sessions.attempt(headers) for headers in agents]
    sent = {
        timing.message_id: (attempt, index, timing)
        for attempt, timings in zip(attempts, conversations, strict=True)
        for index, timing in enumerate(timings)
    }
    assert len(sent) == AGENTS * len(CONVERSATION)

    published = evidence.published()
    assert published.rows == published.verified_rows == len(sent)

    engine = engine_for(evidence.settings.control_database_url)
    read = read_attempt_evidence(engine, open_object_store(evidence.settings.objects_url), attempts)
    assert read.problems == {}
    stored = [call for calls in read.calls.values() for call in calls]
    assert sorted(f"msg_{call.call_id}" for call in stored) == sorted(sent)
    for call in stored:
        attempt, index, timing = sent[f"msg_{call.call_id}"]
        assert (call.attempt_id, call.call_index) == (attempt, index)
        assert len(call.prompt_tokens) == timing.input_tokens
        assert len(call.completion_tokens) == len(call.logprobs) > 1
        assert call.completion_tokens[-1] == STOP_TOKEN
        assert set(call.logprobs) == {COMPLETION_LOGPROB}
    assert len({tuple(call.completion_tokens) for call in stored}) == 1

    sampling_ms = {f"msg_{call.call_id}": call.sample_ms for call in stored}
    total_ms = [timing.total_ms for *_, timing in sent.values()]
    added_ms = [timing.total_ms - sampling_ms[message] for message, (*_, timing) in sent.items()]
    in_flight = sum(total_ms) / wall_ms
    print(
        f"\n{AGENTS} agents x {len(CONVERSATION)} streaming calls in {wall_ms / 1e3:.1f} s, "
        f"{in_flight:.1f} in flight on average; proxy-added latency p50 "
        f"{percentile(added_ms, 0.5):.0f} ms, p99 {percentile(added_ms, 0.99):.0f} ms; "
        f"end-to-end p50 {percentile(total_ms, 0.5):.0f} ms, "
        f"p99 {percentile(total_ms, 0.99):.0f} ms"
    )
    assert in_flight >= MIN_IN_FLIGHT
