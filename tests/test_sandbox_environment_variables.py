"""Only declared variables reach a sandboxed command; the host's environment does not."""

from __future__ import annotations

import asyncio

import pytest
from sandbox_support import isolated_state, make_environment, make_task


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def run_env(environment, **exec_options) -> dict[str, str]:
    async def probe():
        await environment.start(force_build=False)
        try:
            result = await environment.exec("env -0", **exec_options)
        finally:
            await environment.stop(delete=True)
        return dict(item.split("=", 1) for item in result.stdout.split("\0") if item)

    return asyncio.run(probe())


def test_sandbox_cannot_see_undeclared_host_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTH_UNDECLARED_SECRET", "do-not-leak")
    variables = run_env(make_environment(make_task(tmp_path), tmp_path / "trial"))
    assert "SYNTH_UNDECLARED_SECRET" not in variables
    assert "do-not-leak" not in "".join(variables.values())
    assert set(variables) <= {"PATH", "HOME", "LANG", "GREETING", "PWD", "SHLVL", "_"}


def test_sandbox_sees_declared_variables_from_task_exec_and_dockerfile(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNTH_DECLARED_SOURCE", "from-host")
    task = make_task(
        tmp_path, extra_toml='\n[environment.env]\nDECLARED = "${SYNTH_DECLARED_SOURCE}"\n'
    )
    variables = run_env(
        make_environment(task, tmp_path / "trial", persistent_env={"PERSISTENT": "p"}),
        env={"PER_CALL": "c"},
    )
    assert variables["DECLARED"] == "from-host"
    assert variables["PERSISTENT"] == "p"
    assert variables["PER_CALL"] == "c"
    assert variables["GREETING"] == "hello"
    assert "SYNTH_DECLARED_SOURCE" not in variables


def test_scoped_agent_variables_reach_only_commands_in_scope(tmp_path):
    environment = make_environment(make_task(tmp_path), tmp_path / "trial")

    async def probe():
        await environment.start(force_build=False)
        try:
            with environment.scoped_exec_env({"AGENT_KEY": "scoped"}):
                inside = await environment.exec("echo ${AGENT_KEY:-unset}")
            outside = await environment.exec("echo ${AGENT_KEY:-unset}")
        finally:
            await environment.stop(delete=True)
        return inside.stdout.strip(), outside.stdout.strip()

    assert asyncio.run(probe()) == ("scoped", "unset")


def test_path_is_exported_so_programs_can_find_themselves(tmp_path):
    """A Dockerfile without ENV still gets the base system PATH, exported to children."""
    task = make_task(
        tmp_path, dockerfile="FROM python:3.11-slim\nWORKDIR /app\nCOPY seed.txt /app/\n"
    )
    environment = make_environment(task, tmp_path / "trial")

    async def probe():
        await environment.start(force_build=False)
        try:
            return await environment.exec("python3 -c 'import sys; print(sys.executable)'")
        finally:
            await environment.stop(delete=True)

    result = asyncio.run(probe())
    assert result.stdout.strip() == "/usr/bin/python3"
    assert "PATH" in run_env(make_environment(task, tmp_path / "trial2"))
