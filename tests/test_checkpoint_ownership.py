"""A checkpoint belongs to the owner of the run that trained it.

Bob trains a real one-batch run on the local model service; the platform records its
checkpoint. Alice, with a proxy token minted for her and a gateway key of hers on the CLI,
can neither sample from it, read it (or the run that holds it), train from it, nor
launch Claude Code on it with `synth claude` (the gateway mints that session for the
owner of her key, and answers as if the checkpoint did not exist); Bob can do all four
(the real Claude Code CLI, answered through the proxy from his checkpoint).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.scoped_token import AttemptScope
from synth_pipelines.control.checkpoints import run_checkpoints
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.runs import list_runs
from synth_pipelines.control.schema import evidence_calls
from synth_pipelines.credentials import load_signing_key, mint_token
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.conftest import PROJECT_ROOT, operator_key
from tests.gateway_support import Gateway, gateway
from tests.live_services import Proxy, platform, set_script
from tests.training_runs import (
    accept_training,
    refreshed,
    run_batch,
    script_one_right_one_wrong,
    training_dataset,
)

SYNTH = str(Path(sys.executable).parent / "synth")
PLAN = {
    "groups_per_batch": 1,
    "attempts_per_group": 2,
    "batches": 1,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
ANOTHER_OWNER = "belongs to another owner"


def _token(proxy: Proxy, owner: str, model: str) -> str:
    return mint_token(
        load_signing_key(proxy.config.signing_key_path),
        AttemptScope(
            run_id="r-interactive",
            attempt_id="a-interactive",
            owner=owner,
            model=model,
            role="interactive",
        ),
        ttl_sec=600,
    )


def _sample(proxy: Proxy, token: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{proxy.url}/v1/messages",
        headers={"x-api-key": token, "anthropic-version": "2023-06-01"},
        json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
        timeout=120,
    )


def _synth(owner: str, *args: str) -> subprocess.CompletedProcess:
    """`synth ARGS` with a key of `owner`'s."""
    return subprocess.run(
        [SYNTH, *args],
        env={**os.environ, "SYNTH_API_KEY": operator_key(owner)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _claude(gw: Gateway, owner: str, model: str, workdir: Path) -> subprocess.CompletedProcess:
    """`synth claude --model MODEL -- -p hi` in `workdir`, with a key of `owner`'s."""
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_PROXY")}
    env |= {"SYNTH_GATEWAY_URL": gw.url, "SYNTH_API_KEY": gw.key(owner), "HOME": str(home)}
    return subprocess.run(
        [SYNTH, "claude", "--model", model, "--", "-p", "hi", "--output-format", "json"],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _refused(result: subprocess.CompletedProcess, said: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_only_the_owner_samples_reads_and_trains_from_a_checkpoint(
    state, cli_gateway, tmp_path, monkeypatch
):
    monkeypatch.setenv("SYNTH_OWNER", "bob")
    with platform(monkeypatch) as (model_url, proxy):
        run = accept_training(training_dataset(tmp_path), PLAN)
        script_one_right_one_wrong(model_url)
        trained = run_batch(run, 0)
        assert trained.success, [e.message for e in trained.all_events if e.is_failure]
        assert refreshed(run).status == "succeeded"
        engine = control_engine(Settings())
        (checkpoint,) = run_checkpoints(engine, run.run_id)
        assert checkpoint.owner == "bob"
        sampler = checkpoint.sampler_path

        set_script(model_url, [{"match": "hi", "completion": "hello from bob", "repeat": True}])
        alice_token = _token(proxy, "alice", sampler)
        for refused in (
            _sample(proxy, alice_token, sampler),
            httpx.get(f"{proxy.url}/v1/models/{sampler}", headers={"x-api-key": alice_token}),
        ):
            assert refused.status_code == 403
            assert refused.json()["error"] == {
                "type": "permission_error",
                "message": f"checkpoint {sampler} {ANOTHER_OWNER}",
            }
        bob_token = _token(proxy, "bob", sampler)
        described = httpx.get(f"{proxy.url}/v1/models/{sampler}", headers={"x-api-key": bob_token})
        assert described.status_code == 200 and described.json()["id"] == sampler
        sampled = _sample(proxy, bob_token, sampler)
        assert sampled.status_code == 200, sampled.text
        assert sampled.json()["content"][0]["text"] == "hello from bob"

        workdir = tmp_path / "bob-project"
        with gateway(proxy.url) as gw:
            # The gateway mints no session on another owner's checkpoint, and its refusal
            # does not say the checkpoint exists.
            refused = _claude(gw, "alice", sampler, workdir)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert f"no model {sampler!r} you may sample" in refused.stderr
            assert ANOTHER_OWNER not in refused.stderr and "Traceback" not in refused.stderr
            launched = _claude(gw, "bob", sampler, workdir)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        assert json.loads(launched.stdout)["result"] == "hello from bob"
        proxy.flush()
        with engine.connect() as conn:
            attempts = [
                row.attempt_id
                for row in conn.execute(
                    select(evidence_calls.c.attempt_id).where(
                        evidence_calls.c.role == "interactive"
                    )
                )
            ]
        evidence = read_attempt_evidence(
            engine, open_object_store(Settings().objects_url), attempts
        )
        calls = [call for attempt in attempts for call in evidence.calls[attempt]]
        # Only Bob's launch reached the model; every call it made was his checkpoint's.
        assert calls and {call.model for call in calls} == {sampler}

    # Through the gateway, Bob's run is answered to Alice as one that does not exist.
    for read in (
        ("run", "checkpoints", run.run_id),
        ("run", "show", run.run_id),
        ("run", "events", run.run_id),
        ("train", "resolve", run.run_id, "--inspect"),
        ("checkpoint", "list", "--run", run.run_id),
    ):
        refused = _synth("alice", *read)
        _refused(refused, f"no run {run.run_id!r} of yours")
        assert (
            sampler not in refused.stdout + refused.stderr and ANOTHER_OWNER not in refused.stderr
        )
    _refused(_synth("alice", "checkpoint", "show", sampler), "no checkpoint of yours matches")
    alice_runs = _synth("alice", "run", "list", "--json")
    assert alice_runs.returncode == 0 and json.loads(alice_runs.stdout) == []
    listed = _synth("bob", "run", "checkpoints", run.run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [c["sampler_path"] for c in json.loads(listed.stdout)] == [sampler]

    plan = tmp_path / "train-plan.json"
    plan.write_text(json.dumps({"kind": "train", **PLAN}))
    start = (
        "train",
        "start",
        "--dataset",
        "test/train@v1",
        "--actor",
        "@profiles/builtin.json",
        "--plan",
        f"@{plan}",
        "--model",
        sampler,
        "--json",
    )
    # Accepting a run asks the proxy and the model service whether its model is served.
    with platform(monkeypatch):
        runs_before = {r.run_id for r in list_runs(engine, limit=1000)}
        # Another owner's checkpoint is refused as one never recorded.
        _refused(_synth("alice", *start), f"--model: model {sampler} is not a known checkpoint")
        assert {r.run_id for r in list_runs(engine, limit=1000)} == runs_before
        unknown = f"{sampler}-never-recorded"
        not_recorded = _synth("bob", *start[:-2], unknown, "--json")
        assert not_recorded.returncode == 2
        assert f"model {unknown} is not a known checkpoint" in not_recorded.stderr
        assert {r.run_id for r in list_runs(engine, limit=1000)} == runs_before

        continued = _synth("bob", *start)
        assert continued.returncode == 0, continued.stderr
    accepted = json.loads(continued.stdout)
    assert (accepted["owner"], accepted["model"], accepted["created"]) == ("bob", sampler, True)
