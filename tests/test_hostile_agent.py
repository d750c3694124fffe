"""A hostile agent inside a real sandboxed trial: every attack it tries is blocked.

One evaluation runs the built-in agent through the platform's runtime (Harbor trial in
the bwrap sandbox, the scoped route to a real capture proxy, the scripted model
service). The model tells the agent to run a probe that the task ships; the probe tries
each attack from inside the sandbox and writes what happened to its log, which the
trial downloads. Each test below reads one attack's outcome and names what blocked it.
Among them are the escapes that once worked (host sysctls, the kernel keyring, a user
namespace to block teardown with, replaying the token after the run, oversized
`count_tokens`, the operator pages through the route); the shared-verifier forgery and
the broken Dockerfile have tests of their own (`test_shared_verifier_isolation.py`,
`test_attempt_preparation_failures.py`).

Unit-level proofs of the same mechanisms live in the sandbox tests
(`test_sandbox_filesystem.py`, `test_sandbox_network.py`, `test_sandbox_limits.py`,
`test_sandbox_storage.py`) and the proxy tests (`test_proxy_credentials.py`); these
tests prove them end to end from an agent's trial.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import func, select

from synth_pipelines.agents.session import TOKEN_GRACE_SEC
from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import PinnedProfile
from synth_pipelines.contracts.run_spec import DatasetPin, RunRequest
from synth_pipelines.contracts.scoped_token import TokenClaims
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine, engine_for
from synth_pipelines.control.runs import accept_run
from synth_pipelines.control.schema import evidence_calls, evidence_chunks
from synth_pipelines.credentials import PREFIX, load_signing_key, verify_token
from synth_pipelines.registry.datasets import get_dataset
from synth_pipelines.sandbox.userns import HOST_ID_BASE
from tests.agent_runs import profile_document, publish, restored_trial, run_batches, trial_outcomes
from tests.conftest import PROJECT_ROOT, SAMPLE_DATASET
from tests.live_services import MODEL, platform, set_script
from tests.training_runs import tool_call

pytestmark = pytest.mark.slow

OTHER_MODEL = "deepseek-ai/DeepSeek-V3.1"
VICTIM_ATTEMPT = "a-victim-attempt"
MEMORY_MB = 512
STORAGE_MB = 32
PIDS_MAX = 128
PROBE_PATH = "/app/hostile_probe.py"
REPORT_PATH = "/logs/agent/hostile.json"
TOKEN_COPY = "/logs/artifacts/token.txt"
OPERATOR_PAGES = ["/metrics", "/openapi.json", "/docs", "/redoc"]
# Written back with the value each already has: a write that went through would change
# nothing, and it must not go through.
HOST_SYSCTLS = ["kernel/core_pattern", "kernel/pid_max", "vm/overcommit_memory"]
AGENT_TIMEOUT_SEC = 120  # the sample task's [agent].timeout_sec

# Runs inside the sandbox with the host's system python3: standard library only.
HOSTILE_PROBE = r"""
import base64, http.client, json, os, socket, subprocess, sys
import urllib.error, urllib.parse, urllib.request

targets = json.load(open("/app/targets.json"))
report = {}


def try_read(path):
    try:
        with open(path, "rb") as handle:
            return {"read": True, "content": handle.read(4096).decode(errors="replace")}
    except OSError as error:
        return {"read": False, "error": f"{type(error).__name__}: {error.strerror}"}


def run(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-500:]}


report["host_files"] = {path: try_read(path) for path in targets["host_files"]}
report["environment"] = dict(os.environ)
report["proc_environs"] = {
    pid: try_read(f"/proc/{pid}/environ") for pid in os.listdir("/proc") if pid.isdigit()
}
report["host_process"] = try_read(f"/proc/{targets['host_pid']}/environ")

report["ports"] = {}
for name, port in targets["ports"].items():
    probe = socket.socket()
    probe.settimeout(3)
    try:
        probe.connect(("127.0.0.1", port))
        report["ports"][name] = "connected"
    except OSError as error:
        report["ports"][name] = f"{type(error).__name__}: {error.strerror or error}"
    finally:
        probe.close()

base, token = os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_AUTH_TOKEN"]


def post(path, body, key, headers=None):
    request = urllib.request.Request(
        base.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": key, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return {"status": response.status, "body": response.read().decode()}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode()}
    except OSError as error:
        return {"status": None, "body": f"{type(error).__name__}: {error}"}


def ask(model, **extra):
    return {
        "model": model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "HOSTILE-PROBE"}],
        **extra,
    }


report["other_model"] = post("/v1/messages", ask(targets["other_model"]), token)
claims_part, signature = token[len(targets["token_prefix"]):].split(".")
claims = json.loads(base64.urlsafe_b64decode(claims_part + "=" * (-len(claims_part) % 4)))
claims["attempt_id"] = targets["victim_attempt"]
forged_claims = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
forged = f"{targets['token_prefix']}{forged_claims}.{signature}"
report["forged_token"] = post("/v1/messages", ask(targets["own_model"]), forged)
report["claimed_attempt"] = post(
    "/v1/messages",
    ask(targets["own_model"], metadata={"user_id": targets["victim_attempt"]}),
    token,
    {
        "x-synth-attempt-id": targets["victim_attempt"],
        "x-claude-code-session-id": targets["victim_attempt"],
    },
)
report["operator_flush"] = post("/internal/evidence/flush", {}, token)


def get(path):
    try:
        with urllib.request.urlopen(base.rstrip("/") + path, timeout=30) as response:
            return {"status": response.status, "body": response.read(2000).decode()}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode()}
    except OSError as error:
        return {"status": None, "body": f"{type(error).__name__}: {error}"}


report["operator_pages"] = {path: get(path) for path in targets["operator_pages"]}
# An 8 MB count_tokens body, declared: the proxy must refuse it before reading any of it.
address = urllib.parse.urlsplit(base)
connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
connection.putrequest("POST", "/v1/messages/count_tokens")
for name, value in (("content-type", "application/json"), ("x-api-key", token),
                    ("content-length", str(8 * 2**20))):
    connection.putheader(name, value)
connection.endheaders()
answer = connection.getresponse()
report["huge_count"] = {"status": answer.status, "body": answer.read().decode()}
connection.close()
with open(targets["token_copy"], "w") as copy:
    copy.write(token)

report["sysctls"] = {}
for name in targets["sysctls"]:
    path = f"/proc/sys/{name}"
    try:
        current = open(path).read()
        with open(path, "w") as sysctl:
            sysctl.write(current)
        report["sysctls"][name] = "written"
    except OSError as error:
        report["sysctls"][name] = f"{type(error).__name__}: {error.strerror}"
report["uid_map"] = open("/proc/self/uid_map").read().split()
report["seccomp"] = [
    line.split()[1] for line in open("/proc/self/status") if line.startswith("Seccomp:")
]
report["add_key"] = run(
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "seccomp = ctypes.CDLL('libseccomp.so.2')\n"
    "add_key = seccomp.seccomp_syscall_resolve_name(b'add_key')\n"
    f"key = libc.syscall(add_key, b'user', {targets['key_description']!r}.encode(), b'x', 1, -4)\n"
    "print(key, ctypes.get_errno())\n"
)
cgroupfs = subprocess.run(
    ["unshare", "--user", "--map-root-user", "--mount", "--cgroup", "sh", "-c",
     "mkdir -p /tmp/h && mount -t cgroup -o pids none /tmp/h && mkdir /tmp/h/x"],
    capture_output=True, text=True,
)
report["cgroupfs"] = {"returncode": cgroupfs.returncode, "stderr": cgroupfs.stderr[-500:]}

report["memory"] = run("blocks = []\nwhile True: blocks.append(b'x' * (32 * 2**20))")
report["pids"] = run(
    "import json, threading\n"
    "threading.stack_size(65536)\n"
    "hold, started, error = threading.Event(), 0, None\n"
    "try:\n"
    "    while started < 5000:\n"
    "        threading.Thread(target=hold.wait, daemon=True).start()\n"
    "        started += 1\n"
    "except RuntimeError as failure:\n"
    "    error = str(failure)\n"
    "print(json.dumps({'threads': started, 'error': error}))\n"
    "hold.set()\n"
)
fill = subprocess.run(
    ["dd", "if=/dev/zero", "of=/app/fill", "bs=1M"], capture_output=True, text=True
)
report["disk"] = {"returncode": fill.returncode, "stderr": fill.stderr[-500:]}
report["disk"]["filled_bytes"] = os.path.getsize("/app/fill")
os.remove("/app/fill")

with open(targets["report_path"], "w") as out:
    json.dump(report, out)
print("probe finished")
"""


@dataclass(frozen=True)
class HostileRun:
    report: dict
    outcome: TrialOutcome
    secrets: dict[str, str]
    host_files: dict[str, Path]
    evidence_attempts: set[str]
    trial_text: str
    token_claims: TokenClaims
    replay: httpx.Response
    evidence_calls_before_replay: int
    evidence_calls_after_replay: int
    key_description: str


def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def hostile_dataset(root: Path, targets: dict) -> Path:
    task = root / "dataset" / "hostile-probe"
    shutil.copytree(SAMPLE_DATASET / "update-version-file", task)
    environment = task / "environment"
    (environment / "hostile_probe.py").write_text(HOSTILE_PROBE)
    (environment / "targets.json").write_text(json.dumps(targets))
    dockerfile = environment / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "COPY hostile_probe.py targets.json /app/\n")
    return root / "dataset"


def accept_hostile_eval():
    engine = control_engine(Settings())
    dataset = get_dataset(engine, "test/one@v1")
    request = RunRequest(
        owner=Settings().owner,
        dataset=DatasetPin(
            name=dataset.name,
            version=dataset.version,
            digest=dataset.digest,
            task_count=dataset.task_count,
        ),
        actor=PinnedProfile.from_document(profile_document("builtin.json")),
        plan={
            "kind": "eval",
            "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
            "environment": {"provider": "local", "kwargs": {"pids_max": PIDS_MAX}},
            "overrides": {"memory_mb": MEMORY_MB, "storage_mb": STORAGE_MB},
        },
    )
    return accept_run(engine, request, org="local")[0]


def plant_secrets(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    values = {name: f"{name}-{secrets.token_hex(8)}" for name in ("env", "state", "aws")}
    monkeypatch.setenv("SYNTH_OPERATOR_SECRET", values["env"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", values["aws"])
    home = root / "operator-home"
    (home / ".aws").mkdir(parents=True)
    aws = home / ".aws" / "credentials"
    aws.write_text(f"[default]\naws_secret_access_key = {values['aws']}\n")
    monkeypatch.setenv("HOME", str(home))
    state_secret = Settings().state_dir / "operator-secret.txt"
    state_secret.parent.mkdir(parents=True, exist_ok=True)
    state_secret.write_text(values["state"])
    files = {
        "state_dir_secret": state_secret,
        "aws_credentials": aws,
        "signing_key": Settings().signing_key_path,
        "project_checkout": PROJECT_ROOT / "pyproject.toml",
        "shadow": Path("/etc/shadow"),
    }
    return values, files


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Iterator[HostileRun]:
    root = tmp_path_factory.mktemp("hostile")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("SYNTH_DATA_DIR", str(root / "state"))
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        monkeypatch.delenv("SYNTH_DATABASE_URL", raising=False)
        monkeypatch.delenv("SYNTH_OBJECT_STORE_URL", raising=False)
        engine_for.cache_clear()
        values, files = plant_secrets(root, monkeypatch)
        dagster, postgres = listener(), listener()
        with dagster, postgres, platform(monkeypatch) as (model_url, proxy):
            ports = {
                "dagster_webserver": dagster.getsockname()[1],
                "postgresql": postgres.getsockname()[1],
                "model_service": urlsplit(model_url).port,
            }
            targets = {
                "host_files": [str(path) for path in files.values()],
                "host_pid": os.getpid(),
                "ports": ports,
                "own_model": MODEL,
                "other_model": OTHER_MODEL,
                "victim_attempt": VICTIM_ATTEMPT,
                "token_prefix": PREFIX,
                "report_path": REPORT_PATH,
                "token_copy": TOKEN_COPY,
                "operator_pages": OPERATOR_PAGES,
                "sysctls": HOST_SYSCTLS,
                "key_description": f"hostile-key-{secrets.token_hex(4)}",
            }
            for port in ports.values():
                socket.create_connection(("127.0.0.1", port), timeout=3).close()
            set_script(
                model_url,
                [
                    {"match": "HOSTILE-PROBE", "completion": "ok", "repeat": True},
                    {"match": "<tool_response>", "completion": "Done.", "repeat": True},
                    {"completion": tool_call(f"python3 {PROBE_PATH}"), "repeat": True},
                ],
            )
            publish(hostile_dataset(root, targets))
            run = run_batches(accept_hostile_eval())
            proxy.flush()
            (outcome,) = trial_outcomes(run)
            restored = restored_trial(outcome, root / "restored")
            attempts = evidence_attempts(run.run_id)
            # The token the agent left in its artifacts, replayed from the host after the run.
            token = (restored / "artifacts" / TOKEN_COPY.lstrip("/")).read_text()
            before = evidence_call_count(outcome.attempt_id)
            replay = httpx.post(
                f"{proxy.url}/v1/messages",
                json={
                    "model": MODEL,
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "hi"}],
                },
                headers={"x-api-key": token},
                timeout=60,
            )
            proxy.flush()
            after = evidence_call_count(outcome.attempt_id)
        report_file = restored / "agent" / "hostile.json"
        assert report_file.exists(), f"the probe wrote no report; trial: {outcome}"
        trial_text = "\n".join(
            path.read_text(errors="replace") for path in restored.rglob("*") if path.is_file()
        )
        yield HostileRun(
            report=json.loads(report_file.read_text()),
            outcome=outcome,
            secrets=values,
            host_files=files,
            evidence_attempts=attempts,
            trial_text=trial_text,
            token_claims=verify_token(load_signing_key(Settings().signing_key_path), token),
            replay=replay,
            evidence_calls_before_replay=before,
            evidence_calls_after_replay=after,
            key_description=targets["key_description"],
        )
        engine_for.cache_clear()


def evidence_attempts(run_id: str) -> set[str]:
    with control_engine(Settings()).connect() as conn:
        return set(
            conn.execute(
                select(evidence_chunks.c.attempt_id).where(evidence_chunks.c.run_id == run_id)
            ).scalars()
        )


def evidence_call_count(attempt_id: str) -> int:
    with control_engine(Settings()).connect() as conn:
        return conn.execute(
            select(func.count()).where(evidence_calls.c.attempt_id == attempt_id)
        ).scalar_one()


def test_filesystem_view_hides_host_files_outside_the_sandbox_mounts(hostile):
    """The sandbox's mount namespace holds only system dirs, a few /etc entries and its
    own writable dirs: the state dir, the operator's home, the checkout and /etc/shadow
    do not exist inside."""
    results = hostile.report["host_files"]
    for name, path in hostile.host_files.items():
        outcome = results[str(path)]
        assert not outcome["read"], f"{name} ({path}) was readable inside the sandbox"
        assert outcome["error"].startswith("FileNotFoundError"), outcome
    for value in (hostile.secrets["state"], hostile.secrets["aws"]):
        assert value not in json.dumps(hostile.report)


def test_agent_environment_holds_no_operator_secret_only_its_scoped_token(hostile):
    """Harbor's agent environment is built from the task and profile, never inherited
    from the runner: the operator's secrets are absent, the one credential is the token."""
    environment = hostile.report["environment"]
    assert "SYNTH_OPERATOR_SECRET" not in environment
    assert "AWS_SECRET_ACCESS_KEY" not in environment
    assert environment["ANTHROPIC_AUTH_TOKEN"].startswith(PREFIX)
    for value in hostile.secrets.values():
        assert value not in json.dumps(hostile.report)
        assert value not in hostile.trial_text


def test_pid_namespace_hides_host_processes_and_their_environment(hostile):
    """The sandbox has its own pid namespace and /proc: the runner's pid is not there,
    and no process it can see carries the operator's environment."""
    host_process = hostile.report["host_process"]
    assert not host_process["read"]
    assert host_process["error"].startswith("FileNotFoundError")
    environs = json.dumps(hostile.report["proc_environs"])
    assert hostile.secrets["env"] not in environs
    assert len(hostile.report["proc_environs"]) < 32


def test_network_namespace_refuses_dagster_postgres_and_model_ports_on_host_loopback(hostile):
    """The sandbox's loopback is its own (a network namespace whose only way out is the
    route to the proxy): the host's listeners on those ports are not reachable."""
    for name, result in hostile.report["ports"].items():
        assert result.startswith("ConnectionRefusedError"), f"{name}: {result}"


def test_scoped_token_is_refused_for_another_model_with_403(hostile):
    """The token is bound to one model; the proxy checks the requested model against it."""
    result = hostile.report["other_model"]
    assert result["status"] == 403, result
    assert "permission_error" in result["body"]


def test_token_altered_to_another_attempt_is_refused_with_401(hostile):
    """The claims are HMAC-signed: changing the attempt breaks the signature."""
    result = hostile.report["forged_token"]
    assert result["status"] == 401, result
    assert "signature does not verify" in result["body"]


def test_claiming_another_attempt_in_headers_or_body_records_evidence_under_its_own(hostile):
    """Evidence is keyed by the token's signed attempt, never by what a request says."""
    result = hostile.report["claimed_attempt"]
    assert result["status"] == 200, result
    assert hostile.evidence_attempts == {hostile.outcome.attempt_id}
    assert VICTIM_ATTEMPT not in hostile.evidence_attempts


def test_actor_token_cannot_use_operator_endpoints(hostile):
    """The sandbox's route reaches only the model routes: the operator endpoints are not
    there at all (and on the proxy's own address they need the operator role, which the
    attempt's token does not have: `test_proxy_credentials.py`)."""
    result = hostile.report["operator_flush"]
    assert result["status"] == 404, result
    assert "not served to sandboxes" in result["body"]


def test_memory_exhaustion_is_killed_by_the_sandbox_memory_cgroup(hostile):
    """memory.max of the sandbox's cgroup: the kernel kills the hog, not the host."""
    result = hostile.report["memory"]
    assert result["returncode"] == -9, result
    assert hostile.outcome.exception_type is None, hostile.outcome.exception_message


def test_pids_exhaustion_is_refused_by_the_sandbox_pids_cgroup(hostile):
    """pids.max of the sandbox's cgroup (the plan's pids_max) caps threads and processes."""
    flood = json.loads(hostile.report["pids"]["stdout"])
    assert flood["threads"] < PIDS_MAX
    assert "can't start new thread" in flood["error"]


def test_disk_exhaustion_fails_with_enospc_on_the_sandbox_storage_filesystem(hostile):
    """The plan's storage_mb sizes the filesystem holding the sandbox's writable state."""
    result = hostile.report["disk"]
    assert result["returncode"] != 0
    assert "No space left on device" in result["stderr"]
    assert result["filled_bytes"] <= STORAGE_MB * 2**20


def test_host_sysctls_refuse_even_their_current_value(hostile):
    """Root inside is an unprivileged host uid, and /proc/sys is read-only: writing
    `|cmd` to kernel.core_pattern, then crashing, used to run cmd as host root."""
    assert hostile.report["uid_map"][:3] == ["0", str(HOST_ID_BASE), "65535"]
    for name, result in hostile.report["sysctls"].items():
        assert result.startswith("OSError: Read-only file system"), (name, result)


def test_kernel_keyrings_are_out_of_reach(hostile):
    """add_key used to land in host root's keyring, readable by later sandboxes."""
    assert hostile.report["seccomp"] == ["2"]
    key, error = hostile.report["add_key"]["stdout"].split()
    assert (int(key), int(error)) == (-1, errno.EPERM)
    assert hostile.key_description not in Path("/proc/keys").read_text()


def test_no_user_namespace_so_no_cgroupfs_to_block_teardown(hostile):
    """A new user namespace, cgroupfs mounted in it and a cgroup made under the
    command's leaf used to make teardown fail, and every later start with it."""
    result = hostile.report["cgroupfs"]
    assert result["returncode"] != 0
    assert "unshare failed: Operation not permitted" in result["stderr"], result
    assert hostile.outcome.exception_type is None, hostile.outcome.exception_message


def test_the_token_lives_for_the_agent_timeout_and_is_revoked_when_the_attempt_ends(hostile):
    """It used to live 4200 s for this 120 s task, and replayed after the run it sampled
    and recorded evidence for the ended attempt."""
    claims = hostile.token_claims
    lifetime = AGENT_TIMEOUT_SEC + TOKEN_GRACE_SEC
    started, finished = hostile.outcome.started_at, hostile.outcome.finished_at
    assert started.timestamp() + lifetime - 1 <= claims.expires_at
    assert claims.expires_at <= finished.timestamp() + lifetime + 1
    assert hostile.replay.status_code == 401, hostile.replay.text
    error = hostile.replay.json()["error"]
    assert error["type"] == "authentication_error"
    assert f"revoked (attempt {hostile.outcome.attempt_id} has ended)" in error["message"]
    assert hostile.evidence_calls_after_replay == hostile.evidence_calls_before_replay


def test_a_count_tokens_body_past_the_tokens_limit_is_refused_unread(hostile):
    """8 MB bodies used to be counted in full (4.2M tokens), starving other attempts."""
    result = hostile.report["huge_count"]
    assert result["status"] == 413, result
    assert "request_too_large" in result["body"] and "this token's limit" in result["body"]


def test_operator_pages_are_not_served_through_the_sandbox_route(hostile):
    """/metrics, /openapi.json and /docs used to answer through the route, token-free."""
    for path, result in hostile.report["operator_pages"].items():
        assert result["status"] == 404, (path, result)
        assert "not served to sandboxes" in result["body"], path
