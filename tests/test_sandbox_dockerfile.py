"""The supported Dockerfile subset is reproduced; anything else is refused by name."""

from __future__ import annotations

import asyncio
import tarfile

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.errors import TaskDefinitionError, UnsupportedTaskError


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("instruction", "reason"),
    [
        (
            "RUN --mount=type=cache,target=/var/cache/pip pip install pytest",
            "RUN --mount needs a container engine's build",
        ),
        ("FROM alpine AS second", "multi-stage builds"),
        ("ADD https://example.com/x.tar.gz /app/", "remote sources"),
        ("COPY --from=builder /out /app/", "--from needs a container engine's build"),
        ("COPY seed.txt /usr/local/seed.txt", "/usr, which the sandbox takes read-only"),
    ],
)
def test_unsupported_dockerfile_is_refused_naming_task_line_and_alternative(
    tmp_path, instruction, reason
):
    dockerfile = f"FROM python:3.12-slim\nWORKDIR /app\n{instruction}\n"
    task = make_task(tmp_path, "needs-a-build", dockerfile=dockerfile)
    with pytest.raises(UnsupportedTaskError) as refused:
        make_environment(task, tmp_path / "trial")
    message = str(refused.value)
    assert "'needs-a-build'" in message
    assert "line 3" in message
    assert reason in message
    assert "docker" in message


@pytest.mark.parametrize(
    ("source", "reason"),
    [("../outside.txt", "resolves outside the build context"), ("missing.txt", "is not in")],
)
def test_copy_of_what_the_build_context_lacks_is_a_broken_task(tmp_path, source, reason):
    """It used to escape as a FileNotFoundError from the constructor."""
    dockerfile = f"FROM python:3.12-slim\nCOPY {source} /app/\n"
    task = make_task(tmp_path, "broken-copy", dockerfile=dockerfile)
    (task / "outside.txt").write_text("outside\n")
    with pytest.raises(TaskDefinitionError, match=reason) as refused:
        make_environment(task, tmp_path / "trial")
    assert "'broken-copy' cannot be prepared" in str(refused.value)
    assert "line 2" in str(refused.value)


def test_prebuilt_image_without_dockerfile_is_refused(tmp_path):
    task = make_task(tmp_path, "prebuilt", extra_toml='\n[environment]\ndocker_image = "x/y:1"\n')
    (task / "environment" / "Dockerfile").unlink()
    with pytest.raises(UnsupportedTaskError, match="prebuilt image 'x/y:1' cannot be pulled"):
        make_environment(task, tmp_path / "trial")


def test_supported_subset_lays_down_workdir_files_and_env(tmp_path):
    dockerfile = (
        "# comment\n"
        "ARG VERSION=1\n"
        "FROM python:3.12-slim AS base\n"
        "LABEL purpose=test\n"
        "ENV TOOL_HOME=/opt/tool PATH=/opt/tool/bin:$PATH\n"
        "WORKDIR /workspace/project\n"
        "COPY seed.txt ./\n"
        "COPY --chmod=755 tool.sh /opt/tool/bin/tool\n"
        "ADD bundle.tar /opt/bundle/\n"
        "COPY data/ /srv/data/\n"
    )
    task = make_task(tmp_path, "subset", dockerfile=dockerfile)
    context = task / "environment"
    (context / "tool.sh").write_text("#!/bin/bash\necho tool-ran\n")
    (context / "data").mkdir()
    (context / "data" / "one.txt").write_text("one")
    (tmp_path / "inner.txt").write_text("from archive")
    with tarfile.open(context / "bundle.tar", "w") as archive:
        archive.add(tmp_path / "inner.txt", arcname="inner.txt")
    environment = make_environment(task, tmp_path / "trial")
    assert environment.recipe.base_image == "python:3.12-slim"

    async def go():
        await environment.start(force_build=False)
        try:
            return await environment.exec(
                "pwd; cat seed.txt; tool; cat /opt/bundle/inner.txt; echo; "
                "cat /srv/data/one.txt; echo; echo $TOOL_HOME"
            )
        finally:
            await environment.stop(delete=True)

    result = asyncio.run(go())
    assert result.stdout.splitlines() == [
        "/workspace/project",
        "seed",
        "tool-ran",
        "from archive",
        "one",
        "/opt/tool",
    ]
