"""`synth proxy serve` binds libtorch for tml-renderers but imports the torch package only
when something reads it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anthropic
import psutil

from synth_pipelines.config import Settings
from tests.conftest import PROJECT_ROOT
from tests.live_services import MODEL, Proxy, model_service, set_script, start_served_proxy
from tests.production_services import free_port

TORCH_EXTENSION = f"{os.sep}torch{os.sep}_C."
"""The torch package's own extension module: mapped once `import torch` has run."""

DEFERRED_THEN_USED = f"""
import sys
from proxy.libtorch import defer_torch_package

assert defer_torch_package()
import tinker
from tml_renderers.tokenizers import Qwen3Tokenizer
from proxy import worker_calls
from synth_pipelines.rendering.model_registry import ModelRegistry

worker_calls.preload(ModelRegistry(), [{MODEL!r}])
tokenizer = Qwen3Tokenizer()
assert tokenizer.decode(tokenizer.encode_ordinary("hello there")) == "hello there"
assert "torch._C" not in sys.modules, "rendering imported the torch package"

import torch
data = tinker.TensorData.from_torch(torch.tensor([3, 1, 2]))
assert data.data == [3, 1, 2] and "torch._C" in sys.modules
assert not defer_torch_package()
print("ok")
"""


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_torch_package_is_imported_the_first_time_something_reads_it():
    done = subprocess.run(
        [sys.executable, "-c", DEFERRED_THEN_USED],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


def test_a_served_proxy_samples_without_the_torch_package(state):
    port = free_port()
    with model_service() as model_url:
        set_script(model_url, [{"completion": "served", "repeat": True}])
        process = start_served_proxy(model_url, port, publish_interval=0.2)
        try:
            from proxy.server import proxy_config

            token = Proxy("", proxy_config(Settings())).token(run="r-lib", attempt="a-lib")
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=token)
            with client.messages.stream(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                text = stream.get_final_text()
            server = psutil.Process(process.pid)
            processes = [server, *server.children(recursive=True)]
            maps = {p.pid: _maps(p.pid) for p in processes}
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    assert text == "served"
    assert len(maps) == 2, "expected the server and its one worker"
    for pid, mapped in maps.items():
        assert "libtorch_cpu.so" in mapped, f"{pid} does not have libtorch bound"
        assert TORCH_EXTENSION not in mapped, f"{pid} imported the torch package"
