"""How a command reaches the gateway: its URL and the operator's API key, from the settings.

The key is `SYNTH_API_KEY`, else the local operator's key that the embedded default wrote
at its first `synth up`. A refusal comes back as the gateway's one-line message and
becomes this command's error (exit 2); a gateway that cannot be reached says where it
was looked for.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from synth_pipelines.cli.output import UserError
from synth_pipelines.config import Settings
from synth_pipelines.tls import client_context

TIMEOUT_SEC = 30.0


def api_key(config: Settings) -> str:
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    try:
        return config.operator_key_path.read_text().strip()
    except FileNotFoundError:
        raise UserError(
            "no gateway API key: set SYNTH_API_KEY to the key an admin gave you, or run "
            f"`synth up`, which writes the local operator's key to {config.operator_key_path}"
        ) from None


def _refusal(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"the gateway answered {response.status_code}: {response.text[:200]}"


def _trust(config: Settings) -> ssl.SSLContext:
    """What the gateway's certificate is checked by: `SYNTH_GATEWAY_CA`, else the system's."""
    if config.gateway_ca is None:
        return client_context()
    try:
        return ssl.create_default_context(cafile=config.gateway_ca)
    except (OSError, ssl.SSLError) as error:
        raise UserError(
            f"SYNTH_GATEWAY_CA {config.gateway_ca} is not a readable certificate file: {error}"
        ) from None


class GatewayClient:
    def __init__(self, config: Settings) -> None:
        self.url = config.gateway_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"authorization": f"Bearer {api_key(config)}"},
            timeout=TIMEOUT_SEC,
            verify=_trust(config),
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON the gateway answers, or its refusal as a `UserError`."""
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TransportError as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            hint = (
                "set SYNTH_GATEWAY_CA to the certificate authority the gateway's operator gave you"
                if "CERTIFICATE_VERIFY_FAILED" in reason
                else "start it with `synth up`, or set SYNTH_GATEWAY_URL to the deployment's "
                "gateway"
            )
            raise UserError(f"cannot reach the gateway at {self.url} ({reason}); {hint}") from None
        if response.is_error:
            raise UserError(_refusal(response))
        return response.json()
