"""Is a run's model served, and can it be trained? Asked before a run is accepted.

The capture proxy decides what a model name means (its registry, and checkpoints as
models); the model service behind a tinker route decides whether that route's base model
is actually there. A run whose model nobody serves would otherwise be accepted and end
with every attempt failing on the platform, so it is refused at submission, naming the
model and how to serve it. Both are asked over HTTP, without the tinker SDK (whose import
alone costs a CLI seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from synth_pipelines.agents.proxy_model import ProxyModelError, proxy_model
from synth_pipelines.config import Settings
from synth_pipelines.contracts.model_info import ModelInfo
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.tls import client_context

PROBE_TIMEOUT_SEC = 10.0


class ModelNotServedError(ValueError):
    """The model is not served, or cannot be trained as the plan asks; the message says
    which and how to serve it."""


@dataclass(frozen=True)
class ServedModels:
    proxy_url: str
    model_service_url: str
    model_service_key: str
    signing_key: Callable[[], bytes]
    """The platform's token signing key, read when a model is first asked about."""
    owner: str

    def require(self, model: str, *, train: bool) -> None:
        """Raise `ModelNotServedError` unless `model` is served (and trainable if `train`)."""
        info = self._proxy_model(model)
        if train and not info.trainable:
            raise ModelNotServedError(
                f"model {model!r} is served through a {info.route!r} route, for inference "
                "only: training needs a model the training backend can optimize (a tinker route)"
            )
        base = info.base_model
        if info.route != "tinker" or base is None:
            return
        supported = self._service_models()
        if base not in supported:
            served = ", ".join(sorted(supported)) or "none"
            what = f"model {model!r}" + (f" (a checkpoint of {base!r})" if base != model else "")
            raise ModelNotServedError(
                f"{what} is not served: the model service at {self.model_service_url} serves "
                f"{served}; serve it with `synth model serve --base-model {base}` (or point "
                "TINKER_BASE_URL at a service that serves it)"
            )
        if train and not supported[base]:
            raise ModelNotServedError(
                f"the model service at {self.model_service_url} serves {base!r} for sampling "
                "only; training on it is not possible there"
            )

    def _operator_token(self) -> str:
        """A short-lived operator token for the proxy's model routes."""
        from synth_pipelines.credentials import mint_token

        return mint_token(
            self.signing_key(),
            AttemptScope(run_id="*", attempt_id="*", owner=self.owner, model="*", role="operator"),
            ttl_sec=300,
        )

    def _proxy_model(self, model: str) -> ModelInfo:
        token = self._operator_token()
        try:
            return proxy_model(self.proxy_url, token, model, timeout_sec=PROBE_TIMEOUT_SEC)
        except ProxyModelError as error:
            if error.status is None:
                raise ModelNotServedError(
                    f"cannot check that model {model!r} is served: {error}; start it with "
                    "`synth up`"
                ) from None
            raise ModelNotServedError(str(error)) from None

    def _service_models(self) -> dict[str, bool]:
        try:
            return model_service_capabilities(self.model_service_url, self.model_service_key)
        except httpx.HTTPError as error:
            raise ModelNotServedError(
                f"cannot check which models are served: the model service at "
                f"{self.model_service_url} did not answer ({error}); start it with `synth up`"
            ) from None


def model_service_capabilities(url: str, api_key: str) -> dict[str, bool]:
    """Each base model a model service serves -> whether it can be trained there."""
    found = httpx.get(
        f"{url}/api/v1/get_server_capabilities",
        headers={"X-API-Key": api_key},
        timeout=PROBE_TIMEOUT_SEC,
        verify=client_context(),
    )
    found.raise_for_status()
    return {
        entry["model_name"]: bool(entry.get("trainable"))
        for entry in found.json().get("supported_models", [])
    }


def served_models(config: Settings, owner: str) -> ServedModels:
    """The proxy and model service this deployment's runs would use, asked as `owner`;
    nothing is asked, and no key read, until a run needs its model checked."""

    def signing_key() -> bytes:
        from synth_pipelines.credentials import SigningKeyError, read_signing_key

        try:
            return read_signing_key(config.signing_key_path)
        except SigningKeyError as error:
            raise ModelNotServedError(f"cannot ask the capture proxy: {error}") from None

    return ServedModels(
        proxy_url=config.proxy_url,
        model_service_url=config.model_backend_url,
        model_service_key=config.tinker_api_key,
        signing_key=signing_key,
        owner=owner,
    )
