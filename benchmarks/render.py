"""Render + tokenize cost per request size, with and without the prefix cache.

Replays Claude Code-shaped requests (the test fixtures: the ~49 KB default first request,
then a session grown by tool round trips up to ~31k Qwen3 tokens) through the model adapters,
in-process, no HTTP. For each size it times:

- uncached: request body bytes -> validated request -> prompt token ids (what a first call, or a
  call without a session id, costs);
- new session: the first request of a session after another session of the same owner sent
  a first request whose billing header line differs (a different task): its system prompt and
  tools are found in the segment cache (what each attempt's first call costs in a run);
- cached next turn: the same, when the session's previous turn is in the prefix cache (what
  each later call of a session costs);

and prints p50 / p90 milliseconds and the uncached / cached ratios measured in this run. A last
table times the other families' uncached render of the first request.

    .venv/bin/python -m benchmarks.render [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from benchmarks.claude_code_requests import first_request, grown_conversation
from synth_pipelines.contracts.messages import parse_messages_request
from synth_pipelines.rendering.adapters import adapter_for
from synth_pipelines.rendering.prefix_cache import CacheScope, PrefixCache

SIZES = {"first request": None, "+0 turns": 0, "+5 turns": 5, "+10 turns": 10, "+20 turns": 20}
SCOPE = CacheScope("bench", "bench", "synth/qwen3-tiny", "session", "main")


def _times_ms(action: Callable[[], object], reps: int, warmups: int = 3) -> list[float]:
    for _ in range(warmups):
        action()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _p(samples: list[float], quantile: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def _body(turns: int | None) -> bytes:
    body = first_request() if turns is None else grown_conversation(turns)
    return json.dumps(body, separators=(",", ":")).encode()


def new_session_row(reps: int) -> None:
    qwen = adapter_for("qwen")
    body = _body(None)
    other = json.dumps(first_request(task="a1f"), separators=(",", ":")).encode()
    uncached = _times_ms(lambda: qwen.render(parse_messages_request(other)), reps)

    def new_session() -> float:
        cache = PrefixCache()
        qwen.render(parse_messages_request(body), prefix_cache=cache, scope=SCOPE)
        scope = CacheScope("bench", "bench-2", "synth/qwen3-tiny", "session-2", "main")
        start = time.perf_counter()
        qwen.render(parse_messages_request(other), prefix_cache=cache, scope=scope)
        return (time.perf_counter() - start) * 1e3

    cached = [new_session() for _ in range(reps)]
    ratio = statistics.median(uncached) / statistics.median(cached)
    print(
        f"\nFirst request of a new session, another task's first request seen before: "
        f"uncached {statistics.median(uncached):.2f} ms p50, segment cache "
        f"{statistics.median(cached):.2f} ms p50 ({ratio:.1f}x)"
    )


def qwen_table(reps: int) -> None:
    qwen = adapter_for("qwen")
    print("Qwen3 (synth/qwen3-tiny): body bytes -> prompt token ids, ms")
    header = f"{'request':<14}{'tokens':>8}{'bytes':>8}  {'uncached p50/p90':>17}"
    print(header + f"  {'cached next turn p50/p90':>25}  {'ratio p50':>9}")
    for label, turns in SIZES.items():
        body = _body(turns)
        tokens = qwen.render(parse_messages_request(body)).prompt_tokens
        uncached = _times_ms(lambda body=body: qwen.render(parse_messages_request(body)), reps)
        line = f"{label:<14}{tokens:>8}{len(body):>8}  "
        line += f"{statistics.median(uncached):>8.2f} /{_p(uncached, 0.9):>7.2f}"
        if turns:
            previous = parse_messages_request(_body(turns - 1))

            def next_turn(body: bytes = body, previous=previous) -> float:
                cache = PrefixCache()
                qwen.render(previous, prefix_cache=cache, scope=SCOPE)
                start = time.perf_counter()
                qwen.render(parse_messages_request(body), prefix_cache=cache, scope=SCOPE)
                return (time.perf_counter() - start) * 1e3

            cached = [next_turn() for _ in range(reps)]
            ratio = statistics.median(uncached) / statistics.median(cached)
            line += f"  {statistics.median(cached):>14.2f} /{_p(cached, 0.9):>7.2f}"
            line += f"  {ratio:>8.1f}x"
        print(line)


def family_table(reps: int) -> None:
    body = _body(None)
    print("\nOther families (tml-renderers native renderers), first request, uncached, ms")
    print(f"{'family':<10}{'tokens':>8}  {'p50':>7}{'p90':>8}")
    for family in ("deepseek", "kimi", "glm"):
        adapter = adapter_for(family)
        tokens = adapter.render(parse_messages_request(body)).prompt_tokens
        samples = _times_ms(
            lambda adapter=adapter: adapter.render(parse_messages_request(body)), reps
        )
        print(
            f"{family:<10}{tokens:>8}  {statistics.median(samples):>7.2f}{_p(samples, 0.9):>8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per row")
    reps = parser.parse_args().reps
    qwen_table(reps)
    new_session_row(reps)
    family_table(reps)


if __name__ == "__main__":
    main()
