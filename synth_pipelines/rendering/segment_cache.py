"""Token ids of text segments, shared by the sessions of one owner and model in a worker.

Every attempt of a run opens with the same harness system prompt and tool definitions
(about 9,400 of the 11,600 tokens of Claude Code's first request), so a session's first call
need not tokenize them again. A long text run is cut into segments where the tokenizer's
pre-tokenizer always cuts too; BPE never merges across such a cut, so a run's ids are its
segments' ids concatenated, and a segment seen before (same owner, model and exact text)
keeps its ids. A segment that differs (Claude Code's billing header line, a task's own
instructions) is tokenized; the result is token-for-token a full tokenization.

`line_starts` is the cut for Qwen's pre-tokenizer: no alternative of its pattern
(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|
\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`) matches a newline followed by a non-space character, so the
position after a newline and before printable ASCII is always a piece boundary; NFC
normalization composes nothing across it either.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable

_LINE_START = re.compile(r"(?<=\n)(?=[!-~])")

SEGMENTED_RUN_CHARS = 2048
"""Shorter runs are tokenized whole: looking their lines up would not save time."""


def line_starts(text: str) -> list[str]:
    """`text` cut before each line that starts with printable ASCII."""
    return _LINE_START.split(text)


class SegmentCache:
    def __init__(self, max_tokens: int = 4_000_000) -> None:
        self.max_tokens = max_tokens
        self._ids: OrderedDict[tuple[str, str, str], array[int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.reused_tokens = 0

    @property
    def cached_tokens(self) -> int:
        return self._size

    def encode(
        self,
        owner: str,
        model: str,
        text: str,
        encode: Callable[[str], list[int]],
        split: Callable[[str], list[str]],
    ) -> array[int]:
        """The ids of `text`: its known segments from the cache, the others tokenized."""
        if len(text) < SEGMENTED_RUN_CHARS:
            return array("I", encode(text))
        ids = array("I")
        for segment in split(text):
            key = (owner, model, segment)
            with self._lock:
                known = self._ids.get(key)
                if known is not None:
                    self._ids.move_to_end(key)
                    self.reused_tokens += len(known)
            if known is None:
                known = array("I", encode(segment))
                self._remember(key, known)
            ids.extend(known)
        return ids

    def _remember(self, key: tuple[str, str, str], ids: array[int]) -> None:
        if len(ids) > self.max_tokens:
            return
        with self._lock:
            previous = self._ids.pop(key, None)
            if previous is not None:
                self._size -= len(previous)
            self._ids[key] = ids
            self._size += len(ids)
            while self._size > self.max_tokens:
                _, evicted = self._ids.popitem(last=False)
                self._size -= len(evicted)
