"""Segment cache: a session's first call reuses the ids of text other sessions sent, exactly."""

from __future__ import annotations

import pytest
from claude_code_requests import first_request
from hypothesis import given, settings
from hypothesis import strategies as st
from tml_renderers import tokenizers

from synth_pipelines.contracts.messages import MessagesRequest
from synth_pipelines.rendering.adapters.qwen import QwenAdapter
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache
from synth_pipelines.rendering.segment_cache import SegmentCache, line_starts


@pytest.fixture(scope="module")
def qwen() -> QwenAdapter:
    return QwenAdapter()


def _scope(session: str, owner: str = "team-a") -> CacheScope:
    return CacheScope(owner, f"cred-{session}", "synth/qwen3-tiny", session, "main")


def _with_billing_line(task: str) -> MessagesRequest:
    """Claude Code's first request; its billing header line varies with the task."""
    return MessagesRequest.model_validate(first_request(task))


_QWEN3 = tokenizers.Qwen3Tokenizer()
_TRICKY_TEXT = st.text(
    alphabet=st.sampled_from(
        [*"\n\n\n\r\t  aeZ09_'s{}\"<>#-.;:,", *"é\u0301ß中文😀\u00a0\u2028Ⅻ٣"]
    ),
    max_size=400,
)


@settings(max_examples=400, deadline=None)
@given(_TRICKY_TEXT)
def test_qwen_ids_of_line_segments_concatenate_to_the_whole_texts_ids(text: str) -> None:
    encode = _QWEN3.encode_ordinary
    assert [token for segment in line_starts(text) for token in encode(segment)] == encode(text)


def test_a_new_sessions_first_call_reuses_the_shared_system_prompt_and_tools(
    qwen: QwenAdapter,
) -> None:
    cache = PrefixCache()
    first = _with_billing_line("593")
    qwen.render(first, prefix_cache=cache, scope=_scope("s-1"))
    before = cache.stats().segment_reused_tokens

    other_task = _with_billing_line("a1f")
    rendered = qwen.render(other_task, prefix_cache=cache, scope=_scope("s-2"))

    assert rendered.tokens == qwen.render(other_task).tokens
    assert rendered.reused_prefix_tokens == 0
    assert cache.stats().segment_reused_tokens - before > 0.8 * rendered.prompt_tokens


def test_segments_are_not_shared_between_owners(qwen: QwenAdapter) -> None:
    request = _with_billing_line("593")
    alone = PrefixCache()
    qwen.render(request, prefix_cache=alone, scope=_scope("s-2", owner="team-b"))
    cache = PrefixCache()
    qwen.render(request, prefix_cache=cache, scope=_scope("s-1", owner="team-a"))
    after_team_a = cache.stats().segment_reused_tokens

    rendered = qwen.render(request, prefix_cache=cache, scope=_scope("s-2", owner="team-b"))

    assert rendered.tokens == qwen.render(request).tokens
    # Only lines repeated within team-b's own request are reused, as with a cache of its own.
    reused = cache.stats().segment_reused_tokens - after_team_a
    assert reused == alone.stats().segment_reused_tokens


def test_segment_cache_is_bounded_by_tokens() -> None:
    def encode(text: str) -> list[int]:
        return [ord(character) for character in text]

    cache = SegmentCache(max_tokens=3000)
    text = "".join(f"line {n} " + "x" * 600 + "\n" for n in range(8))

    assert list(cache.encode("o", "m", text, encode, line_starts)) == encode(text)
    assert cache.cached_tokens <= 3000
    assert list(cache.encode("o", "m", text, encode, line_starts)) == encode(text)
