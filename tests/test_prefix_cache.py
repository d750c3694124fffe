"""Prefix cache: reused ids only where the rendered text matches, always equal to a full render."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from claude_code_requests import grown_conversation, tool_round_trip

from synth_pipelines.contracts.messages import MessagesRequest
from synth_pipelines.rendering.adapters.qwen import QwenAdapter
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache, encode_runs

SCOPE = CacheScope(
    owner="team-a", credential="cred-1", model="synth/qwen3-tiny", session="s-1", agent="main"
)


@pytest.fixture(scope="module")
def qwen() -> QwenAdapter:
    return QwenAdapter()


def _request(body: dict[str, Any]) -> MessagesRequest:
    return MessagesRequest.model_validate(body)


def test_growing_session_reuses_the_prefix_and_equals_a_full_render(qwen: QwenAdapter) -> None:
    cache = PrefixCache()
    previous_tokens = 0
    for turns in range(0, 8):
        request = _request(grown_conversation(turns))

        cached = qwen.render(request, prefix_cache=cache, scope=SCOPE)

        assert cached.tokens == qwen.render(request).tokens
        if turns == 0:
            assert cached.reused_prefix_tokens == 0
        else:
            # Everything up to the new turn's assistant header is reused.
            assert previous_tokens - 10 < cached.reused_prefix_tokens < cached.prompt_tokens
        previous_tokens = cached.prompt_tokens
    stats = cache.stats()
    assert (stats.sessions, stats.hits, stats.misses) == (1, 7, 1)


def test_an_edited_early_turn_is_tokenized_again_from_the_edit(qwen: QwenAdapter) -> None:
    cache = PrefixCache()
    body = grown_conversation(6)
    before = qwen.render(_request(body), prefix_cache=cache, scope=SCOPE)
    body["messages"][5]["content"][0]["content"] = "edited output"  # the first grown result
    body["messages"].extend(tool_round_trip(7))
    request = _request(body)

    cached = qwen.render(request, prefix_cache=cache, scope=SCOPE)

    full = qwen.render(request)
    assert cached.tokens == full.tokens
    first_difference = next(
        index
        for index, (old, new) in enumerate(zip(before.tokens, full.tokens, strict=False))
        if old != new
    )
    # Reuse ends at the run holding the first difference, never past it.
    assert first_difference - 10 < cached.reused_prefix_tokens <= first_difference


def test_thinking_dropped_by_a_new_user_query_is_not_reused(qwen: QwenAdapter) -> None:
    cache = PrefixCache()
    loop = grown_conversation(4)
    loop["thinking"] = {"type": "adaptive"}
    in_loop = qwen.render(_request(loop), prefix_cache=cache, scope=SCOPE)
    loop["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "All listed."}]},
        {"role": "user", "content": "Now summarize."},
    ]
    request = _request(loop)

    after = qwen.render(request, prefix_cache=cache, scope=SCOPE)

    assert after.tokens == qwen.render(request).tokens
    assert "Step 1: list" in qwen._tokenizer.decode(in_loop.tokens)
    assert "Step 1: list" not in qwen._tokenizer.decode(after.tokens)
    assert after.reused_prefix_tokens < in_loop.prompt_tokens - 4 * 20


def test_other_scopes_never_reuse_a_session_prefix(qwen: QwenAdapter) -> None:
    cache = PrefixCache()
    request = _request(grown_conversation(2))
    qwen.render(request, prefix_cache=cache, scope=SCOPE)

    for other in (
        CacheScope("team-b", "cred-1", "synth/qwen3-tiny", "s-1", "main"),
        CacheScope("team-a", "cred-2", "synth/qwen3-tiny", "s-1", "main"),
        CacheScope("team-a", "cred-1", "synth/qwen3-tiny", "s-1", "subagent-1"),
        CacheScope("team-a", "cred-1", "synth/qwen3-tiny", "s-2", "main"),
    ):
        assert qwen.render(request, prefix_cache=cache, scope=other).reused_prefix_tokens == 0
    assert qwen.render(request, prefix_cache=cache, scope=SCOPE).reused_prefix_tokens > 0


def test_cache_is_bounded_by_sessions_and_tokens() -> None:
    def encode(text: str) -> list[int]:
        return [ord(character) for character in text]

    by_sessions = PrefixCache(max_sessions=2)
    for session in ("a", "b", "c"):
        by_sessions.tokenize(CacheScope("o", "c", "m", session, "main"), ["abc", 1], encode)
    assert by_sessions.stats().sessions == 2
    _, reused = by_sessions.tokenize(CacheScope("o", "c", "m", "a", "main"), ["abc", 1], encode)
    assert reused == 0

    by_tokens = PrefixCache(max_tokens=10)
    by_tokens.tokenize(CacheScope("o", "c", "m", "x", "main"), ["abcdef"], encode)
    by_tokens.tokenize(CacheScope("o", "c", "m", "y", "main"), ["abcdef"], encode)
    assert (by_tokens.stats().sessions, by_tokens.stats().cached_tokens) == (1, 6)
    by_tokens.tokenize(CacheScope("o", "c", "m", "z", "main"), ["a" * 11], encode)
    assert by_tokens.stats().cached_tokens <= 10


def test_runs_split_at_special_tokens_tokenize_like_the_whole_text() -> None:
    def encode(text: str) -> list[int]:
        return [len(word) for word in text.split(" ")]

    assert encode_runs(["a bb", 7, "ccc"], encode) == [1, 2, 7, 3]


def test_concurrent_sessions_from_worker_threads_stay_exact(qwen: QwenAdapter) -> None:
    cache = PrefixCache()
    expected = {turns: qwen.render(_request(grown_conversation(turns))).tokens for turns in (3, 4)}
    failures: list[str] = []

    def session(name: str) -> None:
        scope = CacheScope("o", "c", "m", name, "main")
        try:
            for turns in (3, 4, 3, 4):
                rendered = qwen.render(
                    _request(grown_conversation(turns)), prefix_cache=cache, scope=scope
                )
                if rendered.tokens != expected[turns]:
                    failures.append(f"{name}: {turns} turns differ")
        except Exception as exc:  # a worker's failure is the test's result
            failures.append(repr(exc))

    threads = [threading.Thread(target=session, args=(f"s{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert cache.stats().sessions == 4


def test_next_turn_at_31k_tokens_renders_several_times_faster_cached(qwen: QwenAdapter) -> None:
    previous = _request(grown_conversation(19))
    request = _request(grown_conversation(20))
    assert 29_000 < qwen.count_tokens(request) < 33_000

    def best_of(runs: int, render: Any) -> float:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            render()
            times.append(time.perf_counter() - start)
        return min(times)

    def cached_next_turn() -> None:
        cache = PrefixCache()
        qwen.render(previous, prefix_cache=cache, scope=SCOPE)
        start = time.perf_counter()
        qwen.render(request, prefix_cache=cache, scope=SCOPE)
        cached_times.append(time.perf_counter() - start)

    cached_times: list[float] = []
    for _ in range(5):
        cached_next_turn()
    full = best_of(5, lambda: qwen.render(request))

    assert min(cached_times) * 3 < full
