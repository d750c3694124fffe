"""`synth up` finds a running service again, and restarts one whose configuration changed."""

from __future__ import annotations

import socket
import sys

from synth_pipelines.services.supervisor import Service, running_pid, start, stop


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server(port: int, directory: str) -> Service:
    return Service(
        name="files",
        argv=[sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1", "-d", directory],
        health_url=f"http://127.0.0.1:{port}/",
        address=f"http://127.0.0.1:{port}",
    )


def test_a_service_started_again_with_the_same_command_is_found_not_restarted(tmp_path):
    service = _server(_free_port(), str(tmp_path))
    first, started = start(tmp_path, service, cwd=tmp_path)
    try:
        again, started_again = start(tmp_path, service, cwd=tmp_path)
        assert started and not started_again
        assert again == first
    finally:
        stop(tmp_path, service)


def test_a_service_whose_command_changed_is_restarted_with_the_new_one(tmp_path):
    port = _free_port()
    old = _server(port, str(tmp_path))
    first, _ = start(tmp_path, old, cwd=tmp_path)
    (tmp_path / "other").mkdir()
    new = _server(port, str(tmp_path / "other"))
    try:
        second, started = start(tmp_path, new, cwd=tmp_path)
        assert started
        assert second != first
        assert running_pid(tmp_path, new) == second
    finally:
        stop(tmp_path, new)
