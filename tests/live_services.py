"""Real services for tests: the local model service and the capture proxy on free ports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from proxy.app import create_app
from proxy.config import ProxyConfig
from proxy.sandbox_listener import sandbox_socket
from synth_pipelines.config import Settings
from synth_pipelines.contracts.sampling_limits import SamplingLimits
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.credentials import load_signing_key, mint_token
from synth_pipelines.rendering.model_registry import ModelRegistry
from synth_pipelines.tinker_local.app import create_app as create_model_service
from synth_pipelines.tinker_local.server import serving
from tests.conftest import PROJECT_ROOT, serving_gateway

MODEL = "synth/qwen3-tiny"


@contextmanager
def model_service(
    *, scripted: bool = True, app_hook: Callable[[FastAPI], None] | None = None
) -> Iterator[str]:
    """`app_hook` lets a test put its own instrumentation (e.g. a slow endpoint) in front."""
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    app = create_model_service(MODEL, scripted=scripted, object_store_url=Settings().objects_url)
    if app_hook is not None:
        app_hook(app)
    with serving(app) as url:
        yield url


def set_script(model_url: str, entries: list[dict]) -> None:
    httpx.put(
        f"{model_url}/scripted/v1/script",
        json={"entries": entries},
        headers={"X-API-Key": Settings().tinker_api_key},
    ).raise_for_status()


@dataclass(frozen=True)
class Proxy:
    url: str
    config: ProxyConfig
    sandbox_socket: Path | None = None
    """The listener sandboxes' routes reach: the model routes only."""

    def token(
        self,
        *,
        run: str = "r-test",
        attempt: str = "a-test",
        model: str = MODEL,
        role: str = "actor",
        batch: str | None = None,
        trial: str | None = None,
        ttl: int = 600,
        sampling_seed: int | None = None,
        sampling_temperature: float | None = None,
        sampling_limits: SamplingLimits | None = None,
    ) -> str:
        return mint_token(
            load_signing_key(self.config.signing_key_path),
            AttemptScope(
                run_id=run,
                attempt_id=attempt,
                owner=Settings().owner,
                model=model,
                role=role,
                batch=batch,
                trial_id=trial,
                sampling_seed=sampling_seed,
                sampling_temperature=sampling_temperature,
                sampling_limits=sampling_limits,
            ),
            ttl_sec=ttl,
        )

    def flush(self) -> dict:
        response = httpx.post(
            f"{self.url}/internal/evidence/flush",
            json={},
            headers={"x-api-key": self.token(role="operator")},
            timeout=60,
        )
        response.raise_for_status()
        return response.json()


def start_served_proxy(model_url: str, port: int, publish_interval: float) -> subprocess.Popen:
    """`synth proxy serve --workers 1` as an operator starts it, once its health answers;
    in a session of its own, so that a test can kill it with its worker."""
    env = {
        **os.environ,
        "SYNTH_PROXY_URL": f"http://127.0.0.1:{port}",
        "TINKER_BASE_URL": model_url,
        "SYNTH_PROXY_PUBLISH_INTERVAL_SEC": str(publish_interval),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "synth_pipelines.cli", "proxy", "serve", "--workers", "1"],
        cwd=PROJECT_ROOT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError("the proxy did not start")


@contextmanager
def capture_proxy(
    model_url: str,
    *,
    workers: int = 1,
    backend_timeout_sec: float = 600.0,
    registry: ModelRegistry | None = None,
    generation_limit: int = ProxyConfig.generation_limit,
) -> Iterator[Proxy]:
    """`registry`: the models the proxy serves (their context windows bound prompt fitting);
    None: the default registry. `generation_limit`: calls sampling at once, all tokens'."""
    config = Settings()
    proxy_config = ProxyConfig(
        state_dir=config.state_dir,
        signing_key_path=config.signing_key_path,
        database_url=config.control_database_url,
        objects_url=config.objects_url,
        model_service_url=model_url,
        model_service_key="tml-test",
        workers=workers,
        report_published=None,
        publish_interval_sec=0.2,
        backend_timeout_sec=backend_timeout_sec,
        registry=registry if registry is not None else ModelRegistry(),
        generation_limit=generation_limit,
    )
    with (
        sandbox_socket(config.proxy_sandbox_socket) as sandboxes,
        serving(create_app(proxy_config), extra_sockets=[sandboxes]) as url,
    ):
        yield Proxy(url, proxy_config, config.proxy_sandbox_socket)


def claude_code() -> Path:
    path = Settings().claude_code
    if not path.exists():
        pytest.fail(f"Claude Code is not installed at {path}; run `make setup`")
    return path


@contextmanager
def platform(
    monkeypatch: pytest.MonkeyPatch,
    *,
    scripted: bool = True,
    app_hook: Callable[[FastAPI], None] | None = None,
) -> Iterator[tuple[str, Proxy]]:
    """Model service and proxy, with the platform's settings pointing at both, and the
    gateway the CLI speaks to, configured with them."""
    with (
        model_service(scripted=scripted, app_hook=app_hook) as model_url,
        capture_proxy(model_url) as proxy,
    ):
        monkeypatch.setenv("SYNTH_PROXY_URL", proxy.url)
        monkeypatch.setenv("SYNTH_MODEL_SERVICE_URL", model_url)
        with serving_gateway(monkeypatch):
            yield model_url, proxy


_CLAUDE_TOOL_CALL = (
    "<think>\nThe user wants a file; I will use Bash.\n</think>\n\n"
    "Creating it now.\n<tool_call>\n"
    '{"name": "Bash", "arguments": {"command": "echo hi > made-by-claude.txt", '
    '"description": "write the file"}}\n</tool_call>'
)
CLAUDE_FILE_SCRIPT = [
    {
        "match": "<tool_response>",
        "completion": "<think>\nThe command ran.\n</think>\n\nDone: the file holds hi.",
    },
    {"completion": _CLAUDE_TOOL_CALL},
]
"""What the model answers `run_claude_code`'s request with: a Bash call that makes the
file, then, once its result is in the prompt, a final sentence."""


def claude_code_env(
    proxy_url: str, token: str, workdir: Path, max_output_tokens: int = 4096
) -> dict[str, str]:
    """Claude Code's environment for an offline run through the proxy, with its home in
    `workdir` (made here)."""
    (workdir / "home").mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(workdir / "home"),
        "ANTHROPIC_BASE_URL": proxy_url,
        "ANTHROPIC_AUTH_TOKEN": token,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "32768",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_output_tokens),
    }


def run_claude_code(
    proxy_url: str,
    token: str,
    workdir: Path,
    *,
    extra_env=None,
    bare: bool = False,
    extra_args: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """The pinned Claude Code in print mode in `workdir`, asked for one file, through the
    proxy with `token`; `bare`: with `--bare`, a one-line system prompt and only Bash;
    `extra_args`: further command-line options."""
    env = {**claude_code_env(proxy_url, token, workdir), **(extra_env or {})}
    args = [
        str(claude_code()),
        "-p",
        "Create made-by-claude.txt containing hi.",
        "--model",
        MODEL,
        "--allowedTools",
        "Bash",
        "--output-format",
        "json",
    ]
    if bare:
        args += ["--bare", "--system-prompt", "You are terse.", "--tools", "Bash"]
    args += extra_args
    return subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
