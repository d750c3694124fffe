"""Model-family adapters: Anthropic requests to native prompts and back."""

from __future__ import annotations

import threading

from synth_pipelines.rendering.adapters.base import Family, ModelAdapter
from synth_pipelines.rendering.adapters.deepseek import DeepSeekAdapter
from synth_pipelines.rendering.adapters.glm import GlmAdapter
from synth_pipelines.rendering.adapters.kimi import KimiAdapter
from synth_pipelines.rendering.adapters.qwen import QwenAdapter

_ADAPTER_TYPES: dict[Family, type[ModelAdapter]] = {
    "qwen": QwenAdapter,
    "deepseek": DeepSeekAdapter,
    "kimi": KimiAdapter,
    "glm": GlmAdapter,
}
_adapters: dict[Family, ModelAdapter] = {}
_lock = threading.Lock()


def adapter_for(family: Family) -> ModelAdapter:
    """The shared adapter of `family`, built on first use (loading a tokenizer takes ~1 s)."""
    with _lock:
        adapter = _adapters.get(family)
        if adapter is None:
            adapter = _adapters[family] = _ADAPTER_TYPES[family]()
        return adapter
