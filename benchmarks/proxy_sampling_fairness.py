"""How long another caller's one-token call takes while one token floods the proxy.

One token sends `--flood` concurrent calls of `--max-tokens` each, over and over (a 429 is
retried after its `retry-after`, as the Anthropic SDK retries); meanwhile another token makes
one-token calls one after another. The model service is the local one with a real model
(not scripted), so the flood's calls really sample. Printed: the other caller's latencies
quiet (the baseline, same run) and under the flood, the ratio of their medians, and what
the flood's calls were answered.

    .venv/bin/python -m benchmarks.proxy_sampling_fairness [--flood 16] [--max-tokens 256]
        [--victims 5] [--concurrent-calls N] [--tokens-per-sec R]

`--concurrent-calls` and `--tokens-per-sec` are the flooding token's plan limits
(`sampling_limits`); left out, the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from synth_pipelines.contracts.sampling_limits import SamplingLimits


def _call(url: str, token: str, max_tokens: int) -> tuple[int, float, float]:
    """Status, seconds taken, and `retry-after` (0 when none)."""
    started = time.monotonic()
    response = httpx.post(
        f"{url}/v1/messages",
        json={
            "model": "synth/qwen3-tiny",
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hello there"}],
        },
        headers={"x-api-key": token},
        timeout=600,
    )
    retry_after = float(response.headers.get("retry-after", 0))
    return response.status_code, time.monotonic() - started, retry_after


def _measure(args: argparse.Namespace, limits: SamplingLimits) -> dict[str, object]:
    from tests.live_services import capture_proxy, model_service

    with model_service(scripted=False) as model_url, capture_proxy(model_url, workers=2) as proxy:
        flooder = proxy.token(attempt="a-flood", sampling_limits=limits)
        victim = proxy.token(attempt="a-victim")
        _call(proxy.url, victim, 1)
        quiet = [_call(proxy.url, victim, 1)[1] for _ in range(args.victims)]
        stop, answered = threading.Event(), Counter[int]()

        def flood() -> None:
            while not stop.is_set():
                status, _, retry_after = _call(proxy.url, flooder, args.max_tokens)
                answered[status] += 1
                stop.wait(retry_after)

        with ThreadPoolExecutor(args.flood) as pool:
            floods = [pool.submit(flood) for _ in range(args.flood)]
            time.sleep(2)
            loaded = []
            for _ in range(args.victims):
                loaded.append(_call(proxy.url, victim, 1)[1])
                time.sleep(0.3)
            stop.set()
            for running in floods:
                running.result()
    return {
        "flooder_limits": limits.model_dump(),
        "quiet_s": [round(took, 3) for took in quiet],
        "flooded_s": [round(took, 3) for took in loaded],
        "median_ratio": round(statistics.median(loaded) / statistics.median(quiet), 1),
        "flood_answered": dict(answered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--victims", type=int, default=5)
    parser.add_argument("--concurrent-calls", type=int)
    parser.add_argument("--tokens-per-sec", type=float)
    args = parser.parse_args()
    given = {
        "concurrent_calls": args.concurrent_calls,
        "sampled_tokens_per_sec": args.tokens_per_sec,
    }
    limits = SamplingLimits(**{key: value for key, value in given.items() if value is not None})
    with tempfile.TemporaryDirectory(prefix="sampling-fairness-") as scratch:
        os.environ["SYNTH_DATA_DIR"] = f"{scratch}/state"
        os.environ.pop("SYNTH_DATABASE_URL", None)
        os.environ.pop("SYNTH_OBJECT_STORE_URL", None)
        os.environ.setdefault("TINKER_TELEMETRY", "0")
        print(json.dumps(_measure(args, limits), indent=1))


if __name__ == "__main__":
    main()
