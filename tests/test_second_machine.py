"""A team member on another machine works through the gateway alone: from a network
namespace that reaches this host only at the gateway's `--listen` address (no control
database, bucket, model service, proxy or Dagster) and sees this host's state directory
empty, the CLI with a URL, a key and the gateway's certificate authority publishes a
dataset, runs an evaluation, follows its events, reads its results, exports evidence and
shows an attempt, trains two batches through the daemon and launches Claude Code on the
checkpoint; another owner's key is refused on every read and steer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.state_locations import control_database_url, objects_url
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.embedded_environment import embedded_environment
from tests.production_services import free_port
from tests.second_machine import SecondMachine, second_machine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SYNTH = str(Path(sys.executable).parent / "synth")
LOOPBACK_SERVICES = ("SYNTH_DAGSTER_URL", "SYNTH_PROXY_URL", "SYNTH_MODEL_SERVICE_URL")
TASKS = ("add-default-argument", "fix-backup-script")
LEARNER = {
    "name": "lab/learner",
    "version": "1",
    "engine": "builtin",
    "model": "synth/qwen3-tiny",
    "args": ["--max-steps", "1", "--max-tokens", "16"],
    "instruction": {"mode": "stdin"},
}
TRAINING = {
    "kind": "train",
    "groups_per_batch": 1,
    "attempts_per_group": 2,
    "batches": 2,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 16,
    # The tiny base model fails both attempts: keep the group so each batch takes a step.
    "eligibility": {"drop_constant_reward_groups": False, "min_qualified_attempts": 2},
    "budget": {"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}


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


def _trains_and_launches_claude_code(
    machine: SecondMachine,
    member: Callable[..., subprocess.CompletedProcess],
    host_env: dict[str, str],
) -> None:
    """Alice trains two batches through the daemon and launches Claude Code on the
    checkpoint the second saved; Bob may not."""
    learner = machine.home / "learner.json"
    learner.write_text(json.dumps(LEARNER))
    trained = member(
        "alice",
        "train",
        "start",
        "--dataset",
        "lab/two@v1",
        "--actor",
        f"@{learner}",
        "--plan",
        json.dumps(TRAINING),
        "--wait",
        "--json",
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    run_id = json.loads(trained.stdout)["run_id"]
    listed = member("alice", "run", "checkpoints", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    checkpoints = json.loads(listed.stdout)
    assert [c["batch"] for c in checkpoints] == [batch_key(run_id, i) for i in range(2)]
    sampler = checkpoints[-1]["sampler_path"]

    # Claude Code's calls reach the model through the gateway's `/anthropic` and are
    # answered from the owner's checkpoint, kept short by the operator's own output limit.
    launch = ("claude", "--model", sampler, "--", "-p", "hi", "--output-format", "json")
    refused = member("bob", *launch)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"no model {sampler!r} you may sample" in refused.stderr
    launched = member("alice", *launch, claude_output=8)
    report = json.loads(launched.stdout)
    assert set(report["modelUsage"]) == {sampler}, launched.stdout + launched.stderr
    assert report["usage"]["output_tokens"] > 0
    # The tiny model does not end its turn within 8 tokens: Claude Code says so and exits 1.
    assert (launched.returncode, report["api_error"]) in ((0, None), (1, "max_output_tokens"))
    assert _captured_models(Path(host_env["SYNTH_DATA_DIR"])) == {sampler}


def _captured_models(state: Path) -> set[str]:
    """The models of the interactive calls the proxy published to the host's store; it
    publishes an attempt's calls once they settle (10 s after the last), so this waits."""
    engine = create_engine(control_database_url(None, state))
    store = open_object_store(objects_url(None, state))
    deadline = time.monotonic() + 60
    try:
        while True:
            with engine.connect() as conn:
                attempts = [
                    row.attempt_id
                    for row in conn.execute(
                        select(evidence_calls.c.attempt_id).where(
                            evidence_calls.c.role == "interactive"
                        )
                    )
                ]
            if attempts or time.monotonic() > deadline:
                break
            time.sleep(1)
        evidence = read_attempt_evidence(engine, store, attempts)
        return {call.model for attempt in attempts for call in evidence.calls[attempt]}
    finally:
        engine.dispose()


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

            def member(
                owner: str, *args: str, claude_output: int | None = None
            ) -> subprocess.CompletedProcess:
                limit = (
                    {}
                    if claude_output is None
                    else {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(claude_output)}
                )
                return machine.run(
                    [sys.executable, "-m", "synth_pipelines.cli", *args],
                    {
                        "SYNTH_GATEWAY_URL": gateway_url,
                        "SYNTH_API_KEY": keys[owner],
                        "SYNTH_GATEWAY_CA": str(authority),
                        "SYNTH_DATA_DIR": str(machine.home / "state"),
                        "PYTHONPATH": str(PROJECT_ROOT),
                        **limit,
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
            _trains_and_launches_claude_code(machine, member, env)
            # What the second machine sees of this host's state directory: nothing.
            seen = machine.run(["ls", "-A", env["SYNTH_DATA_DIR"]], {})
            assert seen.returncode == 0 and seen.stdout == "", seen.stdout
        finally:
            _host(env, "down")
