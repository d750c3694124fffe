"""A team member on another machine works through the gateway alone: from a network
namespace that reaches this host only at the gateway's `--listen` address (no control
database, bucket, model service, proxy or Dagster) and sees this host's state directory
empty,
the CLI with a URL, a key and the gateway's certificate authority publishes a dataset,
runs an evaluation, follows its events and reads its results; another owner's key is
refused on every read and steer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.embedded_environment import embedded_environment
from tests.production_services import free_port
from tests.second_machine import SecondMachine, second_machine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SYNTH = str(Path(sys.executable).parent / "synth")
LOOPBACK_SERVICES = ("SYNTH_DAGSTER_URL", "SYNTH_PROXY_URL", "SYNTH_MODEL_SERVICE_URL")
TASKS = ("add-default-argument", "fix-backup-script")


def _host(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SYNTH, *args], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600
    )


def _given(machine: SecondMachine, name: str, source: Path) -> Path:
    """A copy of `source` in the second machine's user's home."""
    copied = machine.home / name
    if source.is_dir():
        shutil.copytree(source, copied)
    else:
        shutil.copy(source, copied)
    return copied


def test_another_machine_publishes_runs_and_reads_through_the_gateway_alone(tmp_path):
    env = embedded_environment(tmp_path, LOOPBACK_SERVICES)
    with second_machine(tmp_path / "member", Path(env["SYNTH_DATA_DIR"])) as machine:
        port = free_port()
        gateway_url = f"https://{machine.host_address}:{port}"
        up = _host(env, "up", "--listen", f"{machine.host_address}:{port}", "--json")
        try:
            assert up.returncode == 0, up.stdout + up.stderr
            (gateway,) = [row for row in json.loads(up.stdout) if row["service"] == "gateway"]
            admin = {
                **env,
                "SYNTH_GATEWAY_URL": gateway_url,
                "SYNTH_GATEWAY_CA": gateway["ca_file"],
            }
            keys = {}
            for owner in ("alice", "bob"):
                made = _host(
                    admin, "admin", "key", "create", "--owner", owner, "--org", "lab", "--json"
                )
                assert made.returncode == 0, made.stderr
                keys[owner] = json.loads(made.stdout)["secret"]

            authority = _given(machine, "gateway-ca.pem", Path(gateway["ca_file"]))
            dataset = machine.home / "dataset"
            dataset.mkdir()
            for task in TASKS:
                _given(machine, f"dataset/{task}", SAMPLE_DATASET / task)
            actor = _given(machine, "oracle.json", PROJECT_ROOT / "profiles" / "oracle.json")

            def member(owner: str, *args: str) -> subprocess.CompletedProcess:
                return machine.run(
                    [sys.executable, "-m", "synth_pipelines.cli", *args],
                    {
                        "SYNTH_GATEWAY_URL": gateway_url,
                        "SYNTH_API_KEY": keys[owner],
                        "SYNTH_GATEWAY_CA": str(authority),
                        "SYNTH_DATA_DIR": str(machine.home / "state"),
                        "PYTHONPATH": str(PROJECT_ROOT),
                    },
                )

            # Nothing but the gateway answers at this host's address, and the second
            # machine's loopback is its own.
            for variable in LOOPBACK_SERVICES:
                service_port = int(env[variable].rsplit(":", 1)[1].split("/")[0])
                assert not machine.connects(machine.host_address, service_port), variable
                assert not machine.connects("127.0.0.1", service_port), variable
            assert machine.connects(machine.host_address, port)

            published = member(
                "alice", "dataset", "publish", str(dataset), "--name", "lab/two", "--version", "v1"
            )
            assert published.returncode == 0, published.stdout + published.stderr
            plan = json.dumps({"kind": "eval", "max_tasks": 2, "tasks_per_batch": 1})
            started = member(
                "alice",
                "run",
                "start",
                "--dataset",
                "lab/two@v1",
                "--actor",
                f"@{actor}",
                "--plan",
                plan,
                "--json",
            )
            assert started.returncode == 0, started.stdout + started.stderr
            run = json.loads(started.stdout)
            assert (run["owner"], run["batches"]) == ("alice", 2)

            followed = member("alice", "run", "events", run["run_id"], "--follow", "--json")
            assert followed.returncode == 0, followed.stderr
            kinds = [json.loads(line)["kind"] for line in followed.stdout.splitlines()]
            assert kinds[0] == "run.accepted" and kinds[-1] == "run.succeeded", kinds
            assert kinds.count("attempt.finished") == 2

            shown = member("alice", "run", "show", run["run_id"], "--json")
            assert shown.returncode == 0, shown.stderr
            results = json.loads(shown.stdout)
            assert results["summary"]["attempts"] == 2 and results["summary"]["pass_rate"] == 1.0
            listed = member("alice", "run", "list", "--json")
            assert [row["run_id"] for row in json.loads(listed.stdout)] == [run["run_id"]]

            # Evidence comes back as a file written on the second machine (a read grant).
            table = machine.home / "outcomes.csv"
            exported = member(
                "alice",
                "run",
                "export",
                run["run_id"],
                "--what",
                "outcomes",
                "--format",
                "csv",
                "--out",
                str(table),
                "--json",
            )
            assert exported.returncode == 0, exported.stderr
            assert json.loads(exported.stdout)["rows"] == 2
            assert table.read_text().count("\n") == 3  # the header and two attempts
            attempt = next(
                json.loads(line)["data"]["attempt_id"]
                for line in followed.stdout.splitlines()
                if json.loads(line)["kind"] == "attempt.finished"
            )
            page = machine.home / "attempt.html"
            viewed = member("alice", "attempt", "show", attempt, "--html", str(page))
            assert viewed.returncode == 0, viewed.stderr
            assert attempt in page.read_text()

            # Bob, on the same machine with his own key, learns nothing of Alice's run.
            for args in (
                ("run", "show", run["run_id"], "--json"),
                ("run", "events", run["run_id"]),
                ("run", "metrics", run["run_id"]),
                ("run", "export", run["run_id"], "--what", "outcomes"),
                ("run", "cancel", run["run_id"]),
            ):
                refused = member("bob", *args)
                assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
                assert f"no run {run['run_id']!r} of yours" in refused.stderr, refused.stderr
            unseen = member("bob", "attempt", "show", attempt)
            assert unseen.returncode == 2 and attempt in unseen.stderr, unseen.stderr
            assert json.loads(member("bob", "run", "list", "--json").stdout) == []
            # What the second machine sees of this host's state directory: nothing.
            seen = machine.run(["ls", "-A", env["SYNTH_DATA_DIR"]], {})
            assert seen.returncode == 0 and seen.stdout == "", seen.stdout
        finally:
            _host(env, "down")
