"""Sampling through the tinker SDK: the local model service or the Tinker cloud."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import tinker

from synth_pipelines.contracts.api_errors import ApiError
from synth_pipelines.rendering.adapters.base import SamplerStopReason
from synth_pipelines.rendering.model_registry import TinkerRoute

FORGOTTEN_SESSION = "unknown sampling session"
"""How the local model service refuses a sampling client it does not know (after a restart)."""


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
    stop_reason: SamplerStopReason
    sampler: str


class TinkerSampler:
    """One ServiceClient; one SamplingClient per route, created on first use.

    A call the backend has not answered within `timeout_sec` fails: the SDK keeps retrying
    an unreachable backend for minutes, and nothing should wait on the model longer than a
    harness waits for its answer.
    """

    def __init__(self, base_url: str | None, api_key: str | None, timeout_sec: float):
        self._api_key = api_key
        self._base_url = base_url
        self._services: dict[str | None, tinker.ServiceClient] = {}
        self._clients: dict[TinkerRoute, tinker.SamplingClient] = {}
        self._lock = asyncio.Lock()
        self._timeout_sec = timeout_sec

    def _service(self, url: str | None) -> tinker.ServiceClient:
        """The configured service (None), or another one a route names; made on first use."""
        service = self._services.get(url)
        if service is None:
            service = self._services[url] = tinker.ServiceClient(
                base_url=url or self._base_url, api_key=self._api_key
            )
        return service

    async def _client(self, route: TinkerRoute) -> tinker.SamplingClient:
        async with self._lock:
            client = self._clients.get(route)
            if client is None:
                # The SDK opens its session with the backend on first use, synchronously,
                # retrying an unreachable backend for minutes: not on this event loop.
                service = await asyncio.to_thread(self._service, route.service_url)
                creating = await asyncio.to_thread(
                    service.create_sampling_client,
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
                response = await self._sample(route, prompt_tokens, params)
        except TimeoutError:
            raise ApiError(
                "api_error", f"the model backend did not answer within {self._timeout_sec:g} s"
            ) from None
        except tinker.RequestFailedError as error:
            raise ApiError("api_error", f"the model backend refused the request: {error}") from None
        except (tinker.TinkerError, OSError) as error:
            raise ApiError("api_error", f"the model backend failed: {error}") from None
        (sequence,) = response.sequences
        if sequence.logprobs is None or len(sequence.logprobs) != len(sequence.tokens):
            raise ApiError(
                "api_error", "the model backend returned sampled tokens without aligned logprobs"
            )
        return Sample(
            tokens=list(sequence.tokens),
            logprobs=list(sequence.logprobs),
            stop_reason=sequence.stop_reason,
            sampler=_sampler_name(route),
        )

    async def _sample(
        self, route: TinkerRoute, prompt_tokens: list[int], params: tinker.SamplingParams
    ) -> tinker.SampleResponse:
        prompt = tinker.ModelInput.from_ints(PromptIds(prompt_tokens))
        client = await self._client(route)
        try:
            response: tinker.SampleResponse = await client.sample(
                prompt=prompt, num_samples=1, sampling_params=params
            )
            return response
        except tinker.RequestFailedError as error:
            if FORGOTTEN_SESSION not in str(error):
                raise
        # The service restarted since this client was made, and its sessions went with it:
        # a new session and client, instead of failing every later call on the route.
        async with self._lock:
            if self._clients.get(route) is client:
                self._services.pop(route.service_url, None)
                for stale in [r for r in self._clients if r.service_url == route.service_url]:
                    del self._clients[stale]
        client = await self._client(route)
        retried: tinker.SampleResponse = await client.sample(
            prompt=prompt, num_samples=1, sampling_params=params
        )
        return retried

    def close(self) -> None:
        for service in self._services.values():
            service.close("success")


def _sampler_name(route: TinkerRoute) -> str:
    """What sampled: the checkpoint or base model, and the service when it is not the
    configured one (so that a teacher's answers never pass for the learner's samples)."""
    name = route.model_path or route.base_model or ""
    return name if route.service_url is None else f"{name}@{route.service_url}"
