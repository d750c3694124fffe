"""One capture proxy serves sandboxes from a state directory at a time: a second one
started against it (on its own port) refuses in one line and leaves the running proxy's
socket in place. Before, the second replaced the socket, and when it stopped every
sandbox's model call got "connection reset" until the services were restarted by hand.
A proxy that was killed leaves nothing that stops the next one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from proxy.sandbox_listener import SandboxSocketTakenError, sandbox_socket
from synth_pipelines.config import Settings
from tests.conftest import PROJECT_ROOT
from tests.production_services import free_port

HOLDER = """
import sys, time
from pathlib import Path
from proxy.sandbox_listener import sandbox_socket
with sandbox_socket(Path(sys.argv[1])) as listener:
    print("serving", flush=True)
    while True:
        connection, _ = listener.accept()
        connection.sendall(b"first")
        connection.close()
"""


@contextmanager
def _other_proxy(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process serving sandboxes at `path`, answering each connection `first`."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "serving\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _answer(path: Path) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        client.connect(str(path))
        return client.recv(16)


def test_a_second_proxy_refuses_and_the_first_keeps_its_socket(tmp_path):
    path = tmp_path / "proxy.sock"
    with _other_proxy(path) as holder:
        inode = path.stat().st_ino
        with (
            pytest.raises(SandboxSocketTakenError, match=f"pid {holder.pid}"),
            sandbox_socket(path),
        ):
            pass
        assert path.stat().st_ino == inode and _answer(path) == b"first"


def test_synth_proxy_serve_against_a_served_state_directory_is_one_line_exit_2(state):
    path = Settings().proxy_sandbox_socket
    with _other_proxy(path):
        env = {**os.environ, "SYNTH_PROXY_URL": f"http://127.0.0.1:{free_port()}"}
        refused = subprocess.run(
            [sys.executable, "-m", "synth_pipelines.cli", "proxy", "serve", "--workers", "0"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2, refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "already serves sandboxes" in line and "SYNTH_DATA_DIR" in line
        assert _answer(path) == b"first"


def test_a_killed_proxy_leaves_nothing_that_stops_the_next(tmp_path):
    path = tmp_path / "proxy.sock"
    with _other_proxy(path) as holder:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert path.exists()
        with (
            sandbox_socket(path) as listener,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client,
        ):
            client.connect(str(path))
            listener.accept()[0].close()
    assert not path.exists()
