"""The real Dagster code server, webserver and daemon for tests that launch backfills (a
regrade), and `synth run regrade` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from synth_pipelines.config import Settings
from synth_pipelines.services.embedded import embedded_services, write_code_server_workspace
from synth_pipelines.services.supervisor import start, stop
from tests.conftest import PROJECT_ROOT

SYNTH = [sys.executable, "-m", "synth_pipelines.cli"]


def regrade_process(run_id: str, *options: str) -> subprocess.Popen:
    """`synth run regrade RUN OPTIONS`, its stdout and stderr piped."""
    return subprocess.Popen(
        [*SYNTH, "run", "regrade", run_id, *options],
        cwd=PROJECT_ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def dagster_services() -> Iterator[Callable[[], None]]:
    """The code server and webserver of the current settings' state, started; yields the
    function that starts the daemon. The daemon's backfill loop looks every 30 s, first as it
    starts: started once the backfills are requested, it takes them up at once. Everything
    started is stopped on the way out."""
    config = Settings()
    write_code_server_workspace(config)
    code_server, daemon, webserver = (
        s for s in embedded_services(config) if s.name.startswith("dagster-")
    )
    started = []

    def start_daemon() -> None:
        start(config.state_dir, daemon, PROJECT_ROOT)
        started.append(daemon)

    try:
        for service in (code_server, webserver):
            start(config.state_dir, service, PROJECT_ROOT)
            started.append(service)
        yield start_daemon
    finally:
        for service in reversed(started):
            stop(config.state_dir, service)


def finish(processes: list[subprocess.Popen]) -> None:
    """Kill and reap the processes still running (a test that failed midway)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()
