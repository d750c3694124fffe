"""How a command reaches the gateway: its URL and the operator's API key, from the settings.

The key is `SYNTH_API_KEY`, else the local operator's key that the embedded default wrote
at its first `synth up`. A refusal comes back as the gateway's one-line message and
becomes this command's error (exit 2); a gateway that cannot be reached says where it
was looked for.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from synth_pipelines.cli.output import UserError
from synth_pipelines.config import Settings
from synth_pipelines.contracts.read_grant import ReadGrant
from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.tls import client_context

TIMEOUT_SEC = 30.0
DOWNLOAD_CHUNK = 1 << 20


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


class GatewayRefusal(UserError):
    """The gateway's refusal: its one-line message, and its status for a command whose
    exit code depends on why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


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
        self._trust = _trust(config)
        self._client = httpx.Client(
            base_url=self.url,
            headers={"authorization": f"Bearer {api_key(config)}"},
            timeout=TIMEOUT_SEC,
            verify=self._trust,
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        if response.is_error:
            raise GatewayRefusal(_refusal(response), response.status_code)
        return response

    def _unreachable(self, error: httpx.TransportError) -> UserError:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        hint = (
            "set SYNTH_GATEWAY_CA to the certificate authority the gateway's operator gave you"
            if "CERTIFICATE_VERIFY_FAILED" in reason
            else "start it with `synth up`, or set SYNTH_GATEWAY_URL to the deployment's gateway"
        )
        return UserError(f"cannot reach the gateway at {self.url} ({reason}); {hint}")

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON the gateway answers, or its refusal as a `UserError`."""
        return self._send(method, path, **kwargs).json()

    def text(self, method: str, path: str, **kwargs: Any) -> str:
        """The gateway's answer as it sent it (a document printed as it is)."""
        return self._send(method, path, **kwargs).text

    def follow(self, path: str, after: int) -> Iterator[RunEvent]:
        """A run's events after the cursor `after`, streamed (server-sent events) until the
        run ends; a dropped connection is resumed from the last event received."""
        cursor = after
        while True:
            try:
                with self._client.stream(
                    "GET",
                    path,
                    params={"after": cursor, "follow": "true"},
                    timeout=httpx.Timeout(TIMEOUT_SEC, read=None),
                ) as response:
                    if response.is_error:
                        response.read()
                        raise UserError(_refusal(response))
                    for kind, data in _server_sent(response.iter_lines()):
                        if kind == "end":
                            return
                        event = RunEvent.model_validate_json(data)
                        cursor = event.seq
                        yield event
            except httpx.RemoteProtocolError:
                continue  # the stream broke off: resume after the last event received
            except httpx.TransportError as error:
                raise self._unreachable(error) from None

    def upload(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        """PUT bulk bytes to an upload grant's URL, with the headers the grant names and
        without the API key: the URL may be the object store's, and the grant in it is
        the authority. A refusal becomes a `UserError` naming where it came from."""
        where = url.split("?", 1)[0]
        try:
            response = httpx.put(
                url, content=data, headers=headers, timeout=TIMEOUT_SEC, verify=self._trust
            )
        except httpx.TransportError as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(f"cannot upload to {where} ({reason})") from None
        if response.is_error:
            if response.headers.get("content-type", "").startswith("application/json"):
                raise UserError(_refusal(response))
            raise UserError(
                f"the object store refused the upload to {where} ({response.status_code}): "
                f"{response.text[:200]}"
            )

    def download(self, grant: ReadGrant, out: Path) -> None:
        """GET a read grant's bytes into `out`, streamed to disk through a temporary file
        beside it and without the API key (the URL may be the object store's, and the
        grant in it is the authority); bytes unlike the grant's size and SHA-256 leave no
        file."""
        where = grant.url.split("?", 1)[0]
        descriptor, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        digest, size = hashlib.sha256(), 0
        try:
            with (
                os.fdopen(descriptor, "wb") as handle,
                httpx.stream("GET", grant.url, timeout=TIMEOUT_SEC, verify=self._trust) as response,
            ):
                if response.is_error:
                    response.read()
                    raise UserError(f"cannot download from {where}: {_refusal(response)}")
                for chunk in response.iter_bytes(DOWNLOAD_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    handle.write(chunk)
            if (size, digest.hexdigest()) != (grant.size, grant.sha256):
                raise UserError(
                    f"the bytes downloaded from {where} ({size} bytes, sha256 "
                    f"{digest.hexdigest()}) are not the {grant.size} bytes of sha256 "
                    f"{grant.sha256} granted; run the command again"
                )
            os.replace(temporary, out)
        except httpx.TransportError as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UserError(f"cannot download from {where} ({reason})") from None
        finally:
            Path(temporary).unlink(missing_ok=True)


def _server_sent(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """Each message of a server-sent event stream: its event name and data; comments
    (the gateway's keepalives) are skipped."""
    kind, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", list[str]()
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
