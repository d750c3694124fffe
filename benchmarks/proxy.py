"""Our capture proxy against tinker-cookbook's capture proxy (the anchor), side by side.

One run starts, each in its own process, a shared backend (the local model service in
scripted mode: one fixed completion at a constant logprob, so the model costs nothing),
our proxy (`synth proxy serve`) and the anchor (`python -m tinker_cookbook.capture.proxy.serve`,
unmodified, tokenizer from an offline Hugging Face cache). Both get the same streaming Claude
Code-shaped requests: the ~49 KB first request, then a session grown by tool round trips
(about 950 prompt tokens each) up to ~31k tokens; the replayed assistant turns carry no thinking
blocks, which the anchor refuses. It measures, in this one run:

- added latency: end-to-end time minus a direct tinker SDK sample of the identical prompt
  tokens (each proxy's own prompt, read back from what it stored) on the same backend,
  p50 - p50 and p99 - p99; ours with the prefix cache (the previous turn of the same session
  sent just before) and without it (a fresh session per call);
- when `message_start` arrives against the last byte;
- throughput and latency with 8 and 32 concurrent streaming sessions, each replaying a
  conversation call by call (by default the first request and 4 tool turns, then a fresh
  session), for 20 s;
- evidence: rows stored against calls made (ours: flushed, counted in the control database,
  every chunk's checksum and row count verified; the anchor: rows in its SQLite store);
- stored bytes per call (ours: evidence objects; the anchor: its store file);
- time until each proxy's health endpoint answers.

    .venv/bin/python -m benchmarks.proxy [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shutil
import statistics
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tinker

from benchmarks.claude_code_requests import RECORDED_TASK, first_request, grown_conversation
from benchmarks.proxy_clients import (
    Call,
    DirectSampler,
    LoadResult,
    StreamingClient,
    Timing,
    run_load,
)
from benchmarks.proxy_evidence import OurEvidence, Published
from benchmarks.proxy_processes import (
    MODEL,
    Anchor,
    Server,
    start_anchor,
    start_backend,
    start_ours,
)
from proxy.server import DEFAULT_WORKERS

MAX_TOKENS = 1024
"""Claude Code asks for 32,000; the backend's context is 32,768, so ~31k-token prompts need less."""
CLIENT_COUNTS = (8, 32)
SESSION_TURNS = 4
"""A load session: the first request and 4 tool turns (11.6k-14.6k prompt tokens), the size
at which the anchor's concurrency was characterised; `--session-turns 20` grows to ~31k."""


def _body(turns: int | None, task: str = RECORDED_TASK) -> bytes:
    """A streaming request: the first request (`None`) of `task`, or the session after
    `turns` more."""
    body: dict[str, Any] = (
        first_request(task) if turns is None else grown_conversation(turns, thinking=False)
    )
    body["max_tokens"] = MAX_TOKENS
    body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Size:
    label: str
    turns: int | None

    def body(self) -> bytes:
        return _body(self.turns)

    def previous_body(self) -> bytes | None:
        """The request sent just before this one in its session (none before the first)."""
        if self.turns is None:
            return None
        return _body(None if self.turns == 0 else self.turns - 1)


SIZES = (
    Size("first request", None),
    Size("+0 turns", 0),
    Size("+5 turns", 5),
    Size("+10 turns", 10),
    Size("+20 turns", 20),
)


def percentile(samples: list[float], quantile: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(quantile * len(ordered)) - 1))]


@dataclass
class Calls:
    """Timings of one kind of call at one request size."""

    timings: list[Timing] = field(default_factory=list)

    def total(self, quantile: float) -> float:
        return percentile([t.total_ms for t in self.timings], quantile)

    def message_start(self, quantile: float) -> float:
        return percentile([t.message_start_ms for t in self.timings], quantile)


@dataclass
class SizeResult:
    label: str
    ours_tokens: int = 0
    anchor_tokens: int = 0
    ours_uncached: Calls = field(default_factory=Calls)
    ours_cached: Calls = field(default_factory=Calls)
    anchor: Calls = field(default_factory=Calls)
    sdk_ours_ms: list[float] = field(default_factory=list)
    sdk_anchor_ms: list[float] = field(default_factory=list)
    ours_sampling_ms: dict[str, float] = field(default_factory=dict)
    """Our proxy's own sampling time of each timed call, from its evidence, by message id."""

    def started_before_sampling_ended(self) -> tuple[int, int]:
        """(calls whose message_start came at least their sampling time before the last
        byte, calls timed): sampling starts only after message_start is sent."""
        timings = [*self.ours_uncached.timings, *self.ours_cached.timings]
        early = sum(
            t.total_ms - t.message_start_ms >= self.ours_sampling_ms[t.message_id] for t in timings
        )
        return early, len(timings)

    def added(self, calls: Calls, quantile: float) -> float:
        """Added latency of `calls` at `quantile`, against the direct sample of its prompt."""
        sdk = self.sdk_anchor_ms if calls is self.anchor else self.sdk_ours_ms
        return calls.total(quantile) - percentile(sdk, quantile)


class Sessions:
    """Claude Code's headers; for ours, a fresh attempt token and session id per session."""

    def __init__(self, evidence: OurEvidence):
        self._evidence = evidence
        self._numbers = itertools.count()
        self.attempts: dict[str, str] = {}

    def new(self) -> dict[str, str]:
        attempt = f"a-bench-{next(self._numbers):06d}"
        session = str(uuid.uuid4())
        self.attempts[session] = attempt
        return {
            "content-type": "application/json",
            "anthropic-version": "2023-06-01",
            "x-api-key": self._evidence.token(attempt),
            "x-claude-code-session-id": session,
            "x-app": "cli",
        }

    def attempt(self, headers: dict[str, str]) -> str:
        return self.attempts[headers["x-claude-code-session-id"]]


@dataclass
class Bench:
    ours: Server
    anchor: Anchor
    evidence: OurEvidence
    sdk: DirectSampler
    sessions: Sessions
    ours_calls: int = 0
    anchor_calls: int = 0

    def call_ours(self, client: StreamingClient, call: Call) -> Timing:
        timing = client.call(call)
        self.ours_calls += 1
        return timing

    def call_anchor(self, client: StreamingClient, call: Call) -> Timing:
        timing = client.call(call)
        self.anchor_calls += 1
        return timing


def _stored_prompts(
    bench: Bench, ours: StreamingClient, anchor: StreamingClient, size: Size
) -> tuple[list[int], list[int]]:
    """Two warm-up calls to each proxy; the prompt tokens each stored for the last one."""
    headers = bench.sessions.new()
    body = size.body()
    for _ in range(2):
        ours_timing = bench.call_ours(ours, (body, headers))
        anchor_timing = bench.call_anchor(anchor, (body, headers))
    ours_prompt = bench.evidence.prompt_of_last_call(bench.sessions.attempt(headers))
    bench.anchor.wait_for_rows(bench.anchor_calls)
    anchor_prompt = bench.anchor.latest_prompt()
    for who, prompt, timing in (
        ("ours", ours_prompt, ours_timing),
        ("the anchor", anchor_prompt, anchor_timing),
    ):
        if len(prompt) != timing.input_tokens:
            raise RuntimeError(
                f"{who} stored a {len(prompt)}-token prompt for the {size.label} request but "
                f"reported input_tokens={timing.input_tokens}"
            )
    return ours_prompt, anchor_prompt


def measure_latency(bench: Bench, reps: int) -> list[SizeResult]:
    ours, anchor = StreamingClient(bench.ours.url), StreamingClient(bench.anchor.server.url)
    results = [SizeResult(size.label) for size in SIZES]
    prompts = []
    for size, result in zip(SIZES, results, strict=True):
        ours_prompt, anchor_prompt = _stored_prompts(bench, ours, anchor, size)
        result.ours_tokens, result.anchor_tokens = len(ours_prompt), len(anchor_prompt)
        prompts.append(
            (tinker.ModelInput.from_ints(ours_prompt), tinker.ModelInput.from_ints(anchor_prompt))
        )
        bench.sdk.sample_ms(prompts[-1][0])
    bodies = [(size.body(), size.previous_body()) for size in SIZES]
    for rep in range(reps):
        for (body, before), result, (ours_prompt, anchor_prompt) in zip(
            bodies, results, prompts, strict=True
        ):
            if before is None:
                body = _body(None, task=f"{rep:03x}")
            result.ours_uncached.timings.append(bench.call_ours(ours, (body, bench.sessions.new())))
            if before is not None:
                session = bench.sessions.new()
                bench.call_ours(ours, (before, session))
                result.ours_cached.timings.append(bench.call_ours(ours, (body, session)))
            result.anchor.timings.append(bench.call_anchor(anchor, (body, bench.sessions.new())))
            result.sdk_ours_ms.append(bench.sdk.sample_ms(ours_prompt))
            result.sdk_anchor_ms.append(bench.sdk.sample_ms(anchor_prompt))
    ours.close()
    anchor.close()
    sampling = bench.evidence.sampling_ms(list(bench.sessions.attempts.values()))
    for result in results:
        result.ours_sampling_ms = sampling
    return results


def _replaying_sessions(
    new_session: Callable[[], dict[str, str]], clients: int, session_turns: int
) -> list[Iterator[Call]]:
    """Each client replays a conversation call by call (the first request, then one more
    tool turn each), starting at a staggered call, and begins a fresh session after the
    last one."""
    bodies = [_body(turns) for turns in [None, *range(session_turns)]]

    def replay(start: int) -> Iterator[Call]:
        while True:
            headers = new_session()
            for body in bodies[start:]:
                yield body, headers
            start = 0

    return [replay(index * len(bodies) // clients) for index in range(clients)]


@dataclass
class LoadPair:
    clients: int
    ours: LoadResult
    anchor: LoadResult


def measure_load(bench: Bench, duration_sec: float, session_turns: int) -> list[LoadPair]:
    pairs = []
    for index, clients in enumerate(CLIENT_COUNTS):
        results: dict[str, LoadResult] = {}
        for target in ("ours", "anchor") if index % 2 == 0 else ("anchor", "ours"):
            server = bench.ours if target == "ours" else bench.anchor.server
            cpu_before = server.cpu_sec()
            sessions = _replaying_sessions(bench.sessions.new, clients, session_turns)
            result = run_load(server.url, sessions, duration_sec)
            result.server_cpu_sec = server.cpu_sec() - cpu_before
            made = result.completed + result.clients
            if target == "ours":
                bench.ours_calls += made
            else:
                bench.anchor_calls += made
            results[target] = result
        pairs.append(LoadPair(clients, results["ours"], results["anchor"]))
    return pairs


@dataclass(frozen=True)
class Storage:
    ours: Published
    ours_calls: int
    anchor_rows: int
    anchor_calls: int
    anchor_bytes: int

    @property
    def ours_per_call(self) -> float:
        return self.ours.stored_bytes / max(1, self.ours.rows)

    @property
    def anchor_per_call(self) -> float:
        return self.anchor_bytes / max(1, self.anchor_rows)

    @property
    def nothing_lost(self) -> bool:
        return self.ours.rows == self.ours.verified_rows == self.ours_calls


ADDED_FLOOR_MS = 1.0
"""Added latencies under this are measurement noise; ratios count them as this much."""


def _times(better: float, worse: float) -> str:
    return f"{worse / better:.1f}x" if better > 0 else "n/a"


def _latency_ratio(ours_ms: float, anchor_ms: float) -> float:
    return anchor_ms / max(ADDED_FLOOR_MS, ours_ms)


def _cell(result: SizeResult, calls: Calls) -> str:
    if not calls.timings:
        return f"{'-':>15}"
    return f"{result.added(calls, 0.5):6.1f} /{result.added(calls, 0.99):7.1f}"


def print_latency(sizes: list[SizeResult], reps: int) -> None:
    print(
        f"Added latency, ms: e2e - direct SDK sample of the same prompt tokens; streaming, "
        f"max_tokens {MAX_TOKENS}, {reps} calls per cell."
    )
    print(
        f"{'request':<14}{'tokens ours/anchor':>19}  {'ours no cache':>15}  "
        f"{'ours cached':>15}  {'anchor':>15}  {'anchor/ours':>12}  {'anchor/cached':>13}"
    )
    quantiles = "p50 /    p99"
    print(f"{'':<33}  {quantiles:>15}  {quantiles:>15}  {quantiles:>15}  {'p50':>12}  {'p50':>13}")
    for r in sizes:
        anchor = r.added(r.anchor, 0.5)
        cached = (
            f"{_latency_ratio(r.added(r.ours_cached, 0.5), anchor):.1f}x"
            if r.ours_cached.timings
            else "-"
        )
        uncached = f"{_latency_ratio(r.added(r.ours_uncached, 0.5), anchor):.1f}x"
        tokens = f"{r.ours_tokens}/{r.anchor_tokens}"
        print(
            f"{r.label:<14}{tokens:>19}  {_cell(r, r.ours_uncached)}  {_cell(r, r.ours_cached)}  "
            f"{_cell(r, r.anchor)}  {uncached:>12}  "
            f"{cached:>13}"
        )
    print(
        "First request: a new session of another task each time (its billing header line "
        "differs); ours finds the system prompt and tools among earlier sessions' lines."
    )
    print()
    print("Direct SDK sample p50, ms (ours' prompt / the anchor's):")
    print(
        "  "
        + ", ".join(
            f"{r.label} {statistics.median(r.sdk_ours_ms):.1f}/"
            f"{statistics.median(r.sdk_anchor_ms):.1f}"
            for r in sizes
        )
    )
    print()
    print(
        "message_start / last byte, p50 ms; ours: calls whose message_start came at least "
        "their own sampling time (from the evidence) before the last byte:"
    )
    for r in sizes:
        line = f"  {r.label:<14} ours no cache {r.ours_uncached.message_start(0.5):6.1f} / "
        line += f"{r.ours_uncached.total(0.5):6.1f}"
        if r.ours_cached.timings:
            line += f", cached {r.ours_cached.message_start(0.5):6.1f} / "
            line += f"{r.ours_cached.total(0.5):6.1f}"
        early, timed = r.started_before_sampling_ended()
        line += f" ({early}/{timed});"
        line += f" anchor {r.anchor.message_start(0.5):6.1f} / {r.anchor.total(0.5):6.1f}"
        print(line)


def print_load(loads: list[LoadPair], duration_sec: float, session_turns: int) -> None:
    print(
        f"Concurrent streaming sessions, each the first request and {session_turns} tool "
        f"turns, {duration_sec:.0f} s per cell (cpu: the proxy's processes, per call):"
    )
    print(
        f"{'clients':<8}{'ours req/s':>11}{'p50 ms':>8}{'p99 ms':>8}{'err':>5}{'cpu ms':>8}"
        f"{'anchor req/s':>14}{'p50 ms':>8}{'p99 ms':>8}{'err':>5}{'cpu ms':>8}"
        f"{'ours/anchor':>13}"
    )
    for pair in loads:
        line = f"{pair.clients:<8}"
        for result, width in ((pair.ours, 11), (pair.anchor, 14)):
            cpu = result.server_cpu_sec * 1e3 / max(1, result.completed)
            line += f"{result.per_sec:>{width}.1f}{percentile(result.latencies_ms, 0.5):>8.0f}"
            line += f"{percentile(result.latencies_ms, 0.99):>8.0f}{result.errors:>5}{cpu:>8.1f}"
        print(line + f"{_times(pair.anchor.per_sec, pair.ours.per_sec):>13}")
        for name, result in (("ours", pair.ours), ("anchor", pair.anchor)):
            if result.first_error:
                print(f"  {name}: first error: {result.first_error}")


def print_storage(storage: Storage, ours: Server, anchor: Anchor) -> None:
    published = storage.ours
    print(
        f"Evidence rows / calls made: ours {published.rows} committed, "
        f"{published.verified_rows} verified in {published.chunks} chunks / "
        f"{storage.ours_calls}; anchor {storage.anchor_rows} / {storage.anchor_calls}"
    )
    print(
        f"Stored bytes per call: ours {storage.ours_per_call / 1024:.1f} KiB, anchor "
        f"{storage.anchor_per_call / 1024:.1f} KiB "
        f"({_times(storage.ours_per_call, storage.anchor_per_call)} less)"
    )
    print(
        f"Ready (health answers after start): ours {ours.ready_sec:.2f} s, anchor "
        f"{anchor.server.ready_sec:.2f} s"
    )


@dataclass(frozen=True)
class Target:
    text: str
    met: bool
    measured: str


def targets(
    sizes: list[SizeResult], loads: list[LoadPair], storage: Storage, ours: Server
) -> list[Target]:
    longest, first = sizes[-1], sizes[0]
    next_turn = _latency_ratio(
        longest.added(longest.ours_cached, 0.5), longest.added(longest.anchor, 0.5)
    )
    first_added = first.added(first.ours_uncached, 0.5)
    load = next(pair for pair in loads if pair.clients == max(CLIENT_COUNTS))
    throughput = load.ours.per_sec / max(1e-9, load.anchor.per_sec)
    p99 = percentile(load.ours.latencies_ms, 0.99)
    early, timed = (
        sum(counts)
        for counts in zip(*(r.started_before_sampling_ended() for r in sizes), strict=True)
    )
    return [
        Target(
            f"next-turn added latency at {longest.ours_tokens} tokens >= 8x below the anchor's",
            next_turn >= 8,
            f"{next_turn:.1f}x (p50)",
        ),
        Target(
            f"first request ({first.ours_tokens} tokens) adds <= 15 ms",
            first_added <= 15,
            f"{first_added:.1f} ms (p50)",
        ),
        Target(
            f"{load.clients} sessions: >= 2x the anchor's throughput, p99 < 500 ms, no lost "
            "evidence",
            throughput >= 2 and p99 < 500 and storage.nothing_lost,
            f"{throughput:.1f}x, p99 {p99:.0f} ms, {storage.ours.verified_rows}/"
            f"{storage.ours_calls} calls stored",
        ),
        Target(
            "message_start sent before sampling completes (99% of calls; a client that is "
            "descheduled reads message_start late)",
            early >= 0.99 * timed,
            f"{early} of {timed} calls",
        ),
        Target(
            "stored bytes per call <= 1/4 of the anchor's",
            storage.ours_per_call * 4 <= storage.anchor_per_call,
            f"1/{storage.anchor_per_call / max(1, storage.ours_per_call):.1f}",
        ),
        Target("ready in <= 3 s", ours.ready_sec <= 3, f"{ours.ready_sec:.2f} s"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 calls per cell, 5 s of load")
    parser.add_argument("--reps", type=int, default=None, help="calls per latency cell")
    parser.add_argument("--duration", type=float, default=None, help="seconds of each load")
    parser.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help="our proxy's worker processes (default: as `synth proxy serve`)",
    )
    parser.add_argument(
        "--session-turns",
        type=int,
        default=SESSION_TURNS,
        help="tool turns after the first request in each load session",
    )
    parser.add_argument("--keep", action="store_true", help="keep the state directory and logs")
    args = parser.parse_args(argv)
    reps = args.reps or (5 if args.quick else 30)
    duration = args.duration or (5.0 if args.quick else 20.0)
    root = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    running: list[Server | Anchor] = []
    try:
        print(f"state and logs in {root}", flush=True)
        backend = start_backend(root)
        running.append(backend)
        ours = start_ours(root, backend, args.workers)
        running.append(ours)
        anchor = start_anchor(root, backend)
        running.append(anchor)
        print(
            f"ready: ours {ours.ready_sec:.2f} s, anchor {anchor.server.ready_sec:.2f} s",
            flush=True,
        )
        evidence = OurEvidence(root / "ours", ours.url, MODEL)
        bench = Bench(ours, anchor, evidence, DirectSampler(backend.url), Sessions(evidence))
        sizes = measure_latency(bench, reps)
        print("latency measured; loading", flush=True)
        loads = measure_load(bench, duration, args.session_turns)
        bench.sdk.close()
        published = evidence.published()
        anchor_rows = anchor.wait_for_rows(bench.anchor_calls)
        anchor.stop()
        storage = Storage(
            published, bench.ours_calls, anchor_rows, bench.anchor_calls, anchor.stored_bytes()
        )
    finally:
        for server in reversed(running):
            server.stop()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        f"Capture proxy: ours (synth proxy serve, {args.workers} render workers) vs the anchor "
        "(tinker-cookbook's capture proxy), same requests and backend, one run."
    )
    print()
    print_latency(sizes, reps)
    print()
    print_load(loads, duration, args.session_turns)
    print()
    print_storage(storage, ours, anchor)
    print()
    print("Targets:")
    results = targets(sizes, loads, storage, ours)
    for target in results:
        print(f"  [{'met' if target.met else 'MISSED'}] {target.text}: {target.measured}")
    return 0 if all(target.met for target in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
