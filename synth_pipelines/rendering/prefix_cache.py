"""A bounded per-session cache of prompt token ids, reused only where the rendered text matches.

A prompt is rendered as *runs*: special-token ids and the maximal stretches of ordinary text
between them. Tokenizers split on special tokens before BPE, so each text run tokenizes on its
own and a prompt's ids are the concatenation of its runs' ids. For the next call of the same
session, the leading runs whose text equals the cached runs' text exactly keep their cached
ids; the first run that differs and everything after it are tokenized. The result is
token-for-token what a full tokenization gives, and a changed prefix (edited history, thinking
dropped from an earlier turn) is simply re-tokenized from the first difference.

Entries are scoped by owner, credential, model, native session and agent, so one session's
prompts never serve another's, and the cache is bounded by sessions and by total tokens
(least recently used first out). Where the adapter names how its tokenizer may be cut
(`split`), a text run the session has not seen is looked up segment by segment among the
texts of the same owner and model (`synth_pipelines.rendering.segment_cache`), which is
what makes a session's first call cheap: its system prompt and tools are those of the
attempts before it.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from synth_pipelines.rendering.segment_cache import SegmentCache

Run = int | str
"""A special token id, or ordinary text between special tokens."""


@dataclass(frozen=True)
class CacheScope:
    owner: str
    credential: str
    model: str
    session: str
    agent: str


@dataclass(frozen=True)
class CacheStats:
    sessions: int
    cached_tokens: int
    hits: int
    misses: int
    reused_tokens: int
    tokenized_tokens: int
    segment_reused_tokens: int
    """Ids of a session's unseen runs found among other sessions' segments."""


@dataclass(frozen=True)
class _Entry:
    runs: tuple[Run, ...]
    ids: tuple[array[int], ...]
    size: int


def encode_runs(runs: Sequence[Run], encode: Callable[[str], list[int]]) -> list[int]:
    """Token ids of a whole prompt, with no cache."""
    tokens: list[int] = []
    for run in runs:
        if isinstance(run, int):
            tokens.append(run)
        else:
            tokens.extend(encode(run))
    return tokens


class PrefixCache:
    def __init__(
        self,
        max_sessions: int = 256,
        max_tokens: int = 8_000_000,
        segment_tokens: int = 4_000_000,
    ) -> None:
        self.max_sessions = max_sessions
        self.max_tokens = max_tokens
        self.segments = SegmentCache(segment_tokens)
        self._entries: OrderedDict[CacheScope, _Entry] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._reused = 0
        self._tokenized = 0

    def tokenize(
        self,
        scope: CacheScope,
        runs: Sequence[Run],
        encode: Callable[[str], list[int]],
        split: Callable[[str], list[str]] | None = None,
    ) -> tuple[list[int], int]:
        """Token ids of `runs` and how many of them came from the session's prefix."""
        with self._lock:
            cached = self._entries.get(scope)
        tokens: list[int] = []
        ids: list[array[int]] = []
        reused = 0
        prefix_runs, prefix_ids = (cached.runs, cached.ids) if cached is not None else ((), ())
        matching = True
        for position, run in enumerate(runs):
            if matching and position < len(prefix_runs) and prefix_runs[position] == run:
                run_ids = prefix_ids[position]
                reused += len(run_ids)
            else:
                matching = False
                run_ids = self._encode(scope, run, encode, split)
            ids.append(run_ids)
            tokens.extend(run_ids)
        self._store(scope, _Entry(tuple(runs), tuple(ids), len(tokens)), reused, len(tokens))
        return tokens, reused

    def _encode(
        self,
        scope: CacheScope,
        run: Run,
        encode: Callable[[str], list[int]],
        split: Callable[[str], list[str]] | None,
    ) -> array[int]:
        if isinstance(run, int):
            return array("I", [run])
        if split is None:
            return array("I", encode(run))
        return self.segments.encode(scope.owner, scope.model, run, encode, split)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                sessions=len(self._entries),
                cached_tokens=self._size,
                hits=self._hits,
                misses=self._misses,
                reused_tokens=self._reused,
                tokenized_tokens=self._tokenized,
                segment_reused_tokens=self.segments.reused_tokens,
            )

    def _store(self, scope: CacheScope, entry: _Entry, reused: int, total: int) -> None:
        with self._lock:
            if reused:
                self._hits += 1
            else:
                self._misses += 1
            self._reused += reused
            self._tokenized += total - reused
            previous = self._entries.pop(scope, None)
            if previous is not None:
                self._size -= previous.size
            if entry.size > self.max_tokens:
                return
            self._entries[scope] = entry
            self._size += entry.size
            while len(self._entries) > self.max_sessions or self._size > self.max_tokens:
                _, evicted = self._entries.popitem(last=False)
                self._size -= evicted.size
