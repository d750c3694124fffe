"""Dockerfiles with RUN/USER steps: their images are built without a container engine
into cached layers, and the attempt on them runs with the sandbox's protections."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task, requires_cgroups

from synth_pipelines.config import Settings
from synth_pipelines.sandbox.bases import KNOWN_BASES
from synth_pipelines.sandbox.build_bounds import BuildLimits
from synth_pipelines.sandbox.dockerfile import read_dockerfile
from synth_pipelines.sandbox.errors import ImageBuildError, UnsupportedTaskError
from synth_pipelines.sandbox.image_build import ImageBuilder, step_key
from synth_pipelines.sandbox.leases import image_root

pytestmark = requires_cgroups

BASE = "python:3.11-slim"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def image_task(root: Path, steps: str, name: str = "image-probe") -> Path:
    """A task whose image starts from a nonce step, so its layers are new to any cache
    (the base is shared: it is the expensive part and not what these tests pin)."""
    nonce = secrets.token_hex(8)
    dockerfile = f"FROM {BASE}\nRUN echo {nonce} > /nonce\n{steps}"
    return make_task(root, name, dockerfile=dockerfile)


def builder() -> ImageBuilder:
    return ImageBuilder.configured(Settings())


def build(task: Path, image_builder: ImageBuilder):
    recipe = make_environment(task, task.parent / f"trial-{secrets.token_hex(2)}").recipe
    return image_builder.build(recipe, task / "environment", task=task.name, limits=BuildLimits())


def run_in(environment, *commands: str, user: str | None = None) -> list[str]:
    async def go():
        await environment.start(force_build=False)
        try:
            outputs = []
            for command in commands:
                result = await environment.exec(command, user=user)
                outputs.append((result.stdout or "").strip())
            return outputs
        finally:
            await environment.stop(delete=True)

    return asyncio.run(go())


def mounts() -> str:
    return Path("/proc/self/mountinfo").read_text()


def test_image_is_built_into_layers_once_and_reused_by_later_attempts(tmp_path):
    task = image_task(tmp_path, "ENV STAGE=built\nWORKDIR /srv/app\nRUN echo $STAGE > made\n")
    first = builder()
    image = asyncio.run(build(task, first))
    # The nonce RUN, WORKDIR and the second RUN: three layers above the base.
    assert first.built == 3
    again = builder()
    assert asyncio.run(build(task, again)).key == image.key
    assert (again.built, again.cached) == (0, 3)

    environment = make_environment(task, tmp_path / "trial")
    assert run_in(environment, "pwd; cat made; echo $STAGE") == ["/srv/app\nbuilt\nbuilt"]
    assert environment.image is not None and environment.image.key == image.key


def test_changed_step_or_input_rebuilds_only_from_there(tmp_path):
    task = image_task(tmp_path, "COPY seed.txt /srv/\nRUN cat /srv/seed.txt > /copied\n")
    first = builder()
    asyncio.run(build(task, first))
    (task / "environment" / "seed.txt").write_text("changed\n")
    second = builder()
    image = asyncio.run(build(task, second))
    # The nonce step is reused; the COPY (its input changed) and the step above rebuild.
    assert (second.cached, second.built) == (1, 2)
    assert run_in(make_environment(task, tmp_path / "trial"), "cat /copied") == ["changed"]
    assert image.layers[0].description == "RUN cat /srv/seed.txt > /copied"


def test_concurrent_builds_of_one_step_build_it_once(tmp_path):
    task = image_task(tmp_path, "RUN sleep 1 && date +%s%N > /stamp\n")
    builders = [builder(), builder()]

    async def both():
        return await asyncio.gather(*(build(task, each) for each in builders))

    images = asyncio.run(both())
    assert images[0].key == images[1].key
    assert sum(each.built for each in builders) == 2
    assert sum(each.cached for each in builders) == 0


def test_attempt_writes_go_to_a_discarded_layer_and_teardown_leaves_no_mount(tmp_path):
    task = image_task(tmp_path, "")
    first = make_environment(task, tmp_path / "first")
    assert run_in(first, "echo leaked > /etc/leak && rm /nonce && ls /etc/leak") == ["/etc/leak"]
    sandbox_root = image_root(first.sandbox_dir)
    assert str(sandbox_root) not in mounts()
    assert not sandbox_root.exists()
    assert not first.sandbox_dir.exists()

    second = make_environment(task, tmp_path / "second")
    assert run_in(second, "ls /etc/leak 2>&1; test -s /nonce && echo kept") == [
        "ls: cannot access '/etc/leak': No such file or directory\nkept"
    ]
    layers = builder().store.layers()
    assert not any((layer.diff / "etc" / "leak").exists() for layer in layers)


def test_attempt_on_an_image_keeps_the_sandbox_protections(tmp_path):
    task = image_task(tmp_path, "RUN useradd --create-home agent\n")
    checks = (
        "grep CapEff /proc/self/status",
        "unshare --user true 2>/dev/null && echo escaped || echo refused",
        "echo 1 2>/dev/null > /proc/sys/kernel/core_pattern && echo wrote || echo read-only",
        "python3 -c 'import socket; print(*(name for _, name in socket.if_nameindex()))'",
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)' "
        "2>/dev/null && echo online || echo offline",
    )
    as_root = run_in(make_environment(task, tmp_path / "root"), *checks)
    # Root of the image may act on any of the sandbox's files, and nothing more.
    assert as_root[0].split() == ["CapEff:", "000000000000001f"]
    assert as_root[1:] == ["refused", "read-only", "lo", "offline"]
    as_agent = run_in(make_environment(task, tmp_path / "agent"), *checks, user="agent")
    assert as_agent[0].split() == ["CapEff:", "0000000000000000"]
    assert as_agent[1:] == ["refused", "read-only", "lo", "offline"]


def test_user_step_runs_later_steps_and_the_attempt_as_that_user(tmp_path):
    task = image_task(
        tmp_path,
        "RUN useradd --create-home agent\nUSER agent\nWORKDIR /home/agent\n"
        "RUN id -un > who && touch mine\n",
    )
    environment = make_environment(task, tmp_path / "trial")
    assert run_in(environment, "id -un; pwd; cat who; stat -c %U mine; echo $HOME") == [
        "agent\n/home/agent\nagent\nagent\n/home/agent"
    ]


def test_failing_step_names_the_task_the_line_and_its_output(tmp_path):
    task = image_task(tmp_path, "RUN echo first-line && echo boom-output >&2 && exit 3\n")
    image_builder = builder()
    with pytest.raises(ImageBuildError) as failed:
        asyncio.run(build(task, image_builder))
    message = str(failed.value)
    assert "'image-probe'" in message
    assert "Dockerfile line 3" in message
    assert "(exit 3)" in message
    assert "first-line" in message and "boom-output" in message
    # Nothing of the failed step is left (other tests may be building beside it).
    recipe = make_environment(task, tmp_path / "trial").recipe
    key = KNOWN_BASES[BASE].key
    for step in recipe.steps[:-1]:
        key = step_key(key, step, user="root", workdir="/", inputs="")
    assert image_builder.store.get(key) is not None
    key = step_key(key, recipe.steps[-1], user="root", workdir="/", inputs="")
    assert image_builder.store.get(key) is None
    assert not [
        path for path in image_builder.store.scratch.iterdir() if path.name.startswith(key[:16])
    ]


@pytest.mark.parametrize(
    "base",
    ["ubuntu:24.04", "alpine:3.20", "python:3.12-slim", "ghcr.io/acme/tools:1", "debian@sha256:ab"],
)
def test_base_the_builder_cannot_make_offline_is_refused_naming_it_and_the_choices(tmp_path, base):
    task = make_task(tmp_path, "foreign-base", dockerfile=f"FROM {base}\nRUN true\n")
    with pytest.raises(UnsupportedTaskError) as refused:
        make_environment(task, tmp_path / "trial")
    message = str(refused.value)
    assert "'foreign-base'" in message
    assert f"FROM {base}" in message
    assert "debian:bookworm" in message and "python:3.11-slim" in message
    assert "\n" not in message


def test_run_flags_need_a_container_engine(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {BASE}\nRUN --mount=type=cache,target=/var/cache/pip true\n")
    with pytest.raises(UnsupportedTaskError, match="RUN --mount needs a container engine"):
        read_dockerfile(dockerfile, task="flags", base_env={})
