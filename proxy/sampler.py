"""Sampling through the tinker SDK: the local model service or the Tinker cloud."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import tinker

from proxy.errors import ProxyError
from proxy.model_registry import TinkerRoute


class PromptIds(list[int]):
    """A prompt's token ids as the SDK's request carries them.

    pydantic serializes a `Sequence[int]` field (the SDK's token chunk) item by item in
    Python when its value is a plain list (~1.5 ms for a 12k-token prompt, a tenth of a
    worker's CPU per call), and hands any other sequence type to the JSON encoder as it is.
    The request's JSON is the same either way."""


@dataclass(frozen=True)
class Sample:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str
    sampler: str


class TinkerSampler:
    """One ServiceClient; one SamplingClient per route, created on first use.

    A call the backend has not answered within `timeout_sec` fails: the SDK keeps retrying
    an unreachable backend for minutes, and nothing should wait on the model longer than a
    harness waits for its answer.
    """

    def __init__(self, base_url: str | None, api_key: str | None, timeout_sec: float):
        self._service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
        self._clients: dict[TinkerRoute, tinker.SamplingClient] = {}
        self._lock = asyncio.Lock()
        self._timeout_sec = timeout_sec

    async def _client(self, route: TinkerRoute) -> tinker.SamplingClient:
        async with self._lock:
            client = self._clients.get(route)
            if client is None:
                # The SDK opens its session with the backend on first use, synchronously,
                # retrying an unreachable backend for minutes: not on this event loop.
                creating = await asyncio.to_thread(
                    self._service.create_sampling_client,
                    base_model=route.base_model,
                    model_path=route.model_path,
                )
                client = await creating
                self._clients[route] = client
            return client

    async def sample(
        self, route: TinkerRoute, prompt_tokens: list[int], params: tinker.SamplingParams
    ) -> Sample:
        try:
            async with asyncio.timeout(self._timeout_sec):
                client = await self._client(route)
                response = await client.sample(
                    prompt=tinker.ModelInput.from_ints(PromptIds(prompt_tokens)),
                    num_samples=1,
                    sampling_params=params,
                )
        except TimeoutError:
            raise ProxyError(
                "api_error", f"the model backend did not answer within {self._timeout_sec:g} s"
            ) from None
        except tinker.RequestFailedError as error:
            raise ProxyError(
                "api_error", f"the model backend refused the request: {error}"
            ) from None
        except (tinker.TinkerError, OSError) as error:
            raise ProxyError("api_error", f"the model backend failed: {error}") from None
        (sequence,) = response.sequences
        if sequence.logprobs is None or len(sequence.logprobs) != len(sequence.tokens):
            raise ProxyError(
                "api_error", "the model backend returned sampled tokens without aligned logprobs"
            )
        return Sample(
            tokens=list(sequence.tokens),
            logprobs=list(sequence.logprobs),
            stop_reason=sequence.stop_reason,
            sampler=route.model_path or route.base_model or "",
        )

    def close(self) -> None:
        self._service.close("success")
