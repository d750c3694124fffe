"""Clients of the proxy benchmark: timed streaming calls, concurrent load, direct SDK samples.

Every proxy call streams, as Claude Code does, and must end with `message_stop`; a call that
does not is an error the benchmark reports, never a timing it keeps.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlparse

import aiohttp
import tinker

from benchmarks.proxy_processes import BACKEND_KEY, MODEL

STOP_TOKEN = 151645
SAMPLING = tinker.SamplingParams(max_tokens=1024, stop=[STOP_TOKEN])
"""What both proxies send for the benchmark's requests (`max_tokens: 1024`, Qwen3's stop)."""

Call = tuple[bytes, dict[str, str]]
"""A request body and its headers."""


class CallFailedError(Exception):
    pass


@dataclass(frozen=True)
class Timing:
    message_start_ms: float
    total_ms: float
    message_id: str
    input_tokens: int


def _checked(status: int, data: bytes, url: str) -> None:
    if status != 200 or b"event: message_stop" not in data:
        raise CallFailedError(f"{url} answered {status}: {data[:600]!r}")


def _started_message(data: bytes) -> dict:
    for event in data.split(b"\n\n"):
        if event.startswith(b"event: message_start"):
            return json.loads(event.split(b"data: ", 1)[1])["message"]
    raise CallFailedError(f"no message_start event in {data[:600]!r}")


class StreamingClient:
    """One keep-alive connection that times calls to `message_start` and to the last byte."""

    def __init__(self, url: str):
        address = urlparse(url)
        self.url = url
        self._connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)

    def call(self, call: Call) -> Timing:
        body, headers = call
        started = time.perf_counter()
        self._connection.request("POST", "/v1/messages", body=body, headers=headers)
        response = self._connection.getresponse()
        data = b""
        message_start = None
        while chunk := response.read1(1 << 16):
            data += chunk
            if message_start is None and b"event: message_start" in data:
                message_start = time.perf_counter()
        finished = time.perf_counter()
        _checked(response.status, data, self.url)
        assert message_start is not None
        message = _started_message(data)
        return Timing(
            (message_start - started) * 1e3,
            (finished - started) * 1e3,
            message["id"],
            message["usage"]["input_tokens"],
        )

    def close(self) -> None:
        self._connection.close()


class DirectSampler:
    """The tinker SDK sampling a prompt straight from the backend, as a proxy's call does."""

    def __init__(self, backend_url: str):
        self._service = tinker.ServiceClient(base_url=backend_url, api_key=BACKEND_KEY)
        self._client = self._service.create_sampling_client(base_model=MODEL).result()

    def sample_ms(self, prompt: tinker.ModelInput) -> float:
        started = time.perf_counter()
        response = self._client.sample(prompt, 1, SAMPLING).result()
        elapsed = (time.perf_counter() - started) * 1e3
        if not response.sequences or not response.sequences[0].tokens:
            raise CallFailedError("the backend returned no sampled tokens")
        return elapsed

    def close(self) -> None:
        self._service.close("success").result()


@dataclass
class LoadResult:
    clients: int
    completed: int = 0
    errors: int = 0
    wall_sec: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    first_error: str | None = None
    server_cpu_sec: float = 0.0

    @property
    def per_sec(self) -> float:
        return self.completed / self.wall_sec if self.wall_sec else 0.0


async def _load(url: str, sessions: list[Iterator[Call]], duration_sec: float) -> LoadResult:
    result = LoadResult(clients=len(sessions))
    connector = aiohttp.TCPConnector(limit=len(sessions))
    timeout = aiohttp.ClientTimeout(total=120)
    warmed = 0
    all_warm = asyncio.Event()
    window: dict[str, float] = {}
    last_done = 0.0

    async def one(http: aiohttp.ClientSession, calls: Iterator[Call]) -> None:
        body, headers = next(calls)
        async with http.post(url + "/v1/messages", data=body, headers=headers) as response:
            _checked(response.status, await response.read(), url)

    async def client(http: aiohttp.ClientSession, calls: Iterator[Call]) -> None:
        nonlocal warmed, last_done
        await one(http, calls)
        warmed += 1
        if warmed == len(sessions):
            window["start"] = time.perf_counter()
            window["end"] = window["start"] + duration_sec
            all_warm.set()
        await all_warm.wait()
        while time.perf_counter() < window["end"]:
            started = time.perf_counter()
            try:
                await one(http, calls)
            except (CallFailedError, aiohttp.ClientError, TimeoutError) as error:
                result.errors += 1
                result.first_error = result.first_error or f"{type(error).__name__}: {error}"
                continue
            last_done = time.perf_counter()
            result.completed += 1
            result.latencies_ms.append((last_done - started) * 1e3)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.gather(*(client(http, calls) for calls in sessions))
    result.wall_sec = last_done - window["start"]
    return result


def run_load(url: str, sessions: list[Iterator[Call]], duration_sec: float) -> LoadResult:
    """Each session's calls back to back, all sessions at once, for `duration_sec` after one
    untimed warm-up call each; no call starts after the window closes."""
    return asyncio.run(_load(url, sessions, duration_sec))
