"""One adapter per family is shared by the proxy's worker threads; results must not mix."""

from __future__ import annotations

import threading

import pytest
from family_conversations import follow_up_request

from synth_pipelines.rendering.adapters import adapter_for
from synth_pipelines.rendering.adapters.base import Family


@pytest.mark.parametrize("family", ["qwen", "deepseek", "kimi", "glm"])
def test_shared_adapter_renders_and_parses_identically_from_threads(family: Family) -> None:
    adapter = adapter_for(family)
    request = follow_up_request({"type": "adaptive"})
    expected = adapter.render(request)
    answer = adapter._tokenizer.encode_ordinary("</think>Two directories.")  # type: ignore[attr-defined]
    completion = [*answer, expected.stop_token_ids[0]]
    expected_parse = adapter.parse(expected, completion, "stop")
    failures: list[str] = []

    def work() -> None:
        try:
            for _ in range(25):
                rendered = adapter.render(request)
                parsed = adapter.parse(rendered, completion, "stop")
                if rendered.tokens != expected.tokens:
                    failures.append("render differs")
                if parsed.content != expected_parse.content:
                    failures.append("parse differs")
        except Exception as exc:  # a worker's failure is the test's result
            failures.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert expected_parse.content
    assert adapter_for(family) is adapter
