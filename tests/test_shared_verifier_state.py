"""A shared verifier's tools do not read what the agent left for them.

Harbor's default verifier mode runs the task's tests in the agent's sandbox. Killing the
agent's processes is not enough: its files stay. Here the agent (Harbor's oracle,
running an attacking `solve.sh` as root) writes the wrong answer, then plants a `.pth`
file in the user site-packages under `$HOME`, which would run in the verifier's
`python3` and turn its failing check into exit 0, plus files in `/tests` and the
scratch directories. Before, the attempt was graded 1; now `/tests`, `/tmp`,
`/var/tmp` and `/dev/shm` are emptied before the verifier starts, and its commands run
with a fresh HOME that holds the image's home, not the agent's
(`sandbox/verification_reset.py`).
"""

from __future__ import annotations

import secrets

import pytest
from harbor.models.trial.config import EnvironmentConfig
from sandbox_support import (
    IMPORT_PATH,
    host_settings,
    isolated_state,
    make_task,
    requires_cgroups,
    run_trial,
)

PLANTING_SOLVE_SH = """\
#!/bin/bash
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site"
echo 'import atexit, os; atexit.register(os._exit, 0)' > "$site/zz-forge.pth"
echo planted > /tests/planted.sh
for scratch in /tmp /var/tmp /dev/shm; do
  [ -d "$scratch" ] && echo planted > "$scratch/planted"
done
echo wrong > /app/hello.txt
"""
CHECKING_TEST_SH = """\
#!/bin/bash
ls -A /tests /tmp /var/tmp /dev/shm > /logs/verifier/listing.txt 2>&1
if python3 -c 'import sys; sys.exit(open("/app/hello.txt").read().strip() != "hello")'; then
  echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


@pytest.fixture
def sandbox_state(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def test_a_pth_file_the_agent_left_in_its_user_site_cannot_pass_an_honest_check(
    sandbox_state, tmp_path
):
    task = make_task(
        tmp_path,
        "user-site-forgery",
        solve_sh=PLANTING_SOLVE_SH,
        test_sh=CHECKING_TEST_SH,
        verifier_mode="shared",
    )
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 0.0}
    listing = (tmp_path / "trials" / result.trial_name / "verifier" / "listing.txt").read_text()
    assert "planted" not in listing, listing
    assert "test.sh" in listing


IMAGE_DOCKERFILE = """\
FROM python:3.11-slim
RUN echo {nonce} > /nonce && mkdir -p ~root/.config && echo image > ~root/.config/marker
WORKDIR /app
COPY seed.txt /app/
ENV GREETING=hello
"""
TAMPERING_SOLVE_SH = PLANTING_SOLVE_SH.replace(
    "echo wrong > /app/hello.txt", "echo agent > ~root/.config/marker\necho wrong > /app/hello.txt"
)
HOME_TEST_SH = CHECKING_TEST_SH.replace(
    "> /logs/verifier/listing.txt 2>&1",
    "> /logs/verifier/listing.txt 2>&1\n"
    '{ echo "$HOME"; cat "$HOME/.config/marker"; touch "$HOME/written" && echo writable; } '
    "> /logs/verifier/home.txt 2>&1",
)


@requires_cgroups
def test_a_verifier_on_an_image_starts_from_the_images_home_not_the_agents(sandbox_state, tmp_path):
    task = make_task(
        tmp_path,
        "image-home-forgery",
        dockerfile=IMAGE_DOCKERFILE.format(nonce=secrets.token_hex(8)),
        solve_sh=TAMPERING_SOLVE_SH,
        test_sh=HOME_TEST_SH,
        verifier_mode="shared",
    )
    result = run_trial(task, tmp_path / "trials", "oracle")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 0.0}
    verifier = tmp_path / "trials" / result.trial_name / "verifier"
    assert "planted" not in (verifier / "listing.txt").read_text()
    home, marker, writable = (verifier / "home.txt").read_text().split()
    assert home.startswith("/tmp/.verifier-home-")
    assert (marker, writable) == ("image", "writable")


BESIDE_A_MOUNT_SOLVE_SH = """\
#!/bin/bash
echo planted > /tmp/platform/planted
mkdir -p /tmp/platform/nested && echo planted > /tmp/platform/nested/planted
echo planted > /tmp/planted
echo "$GREETING" > /app/hello.txt
"""
BESIDE_A_MOUNT_TEST_SH = """\
#!/bin/bash
ls -AR /tmp > /logs/verifier/listing.txt 2>&1
if [ "$(cat /tmp/platform/runtime/tool.txt)" = tool ] && [ "$(cat /app/hello.txt)" = hello ]; then
  echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def test_what_the_platform_mounted_under_tmp_outlives_the_reset_and_nothing_beside_it(
    sandbox_state, tmp_path
):
    """A checkout in the system temp directory binds the harness's runtime under `/tmp`:
    the reset must empty `/tmp` around that mount, not fail on it (which would turn every
    honest attempt into an assessed 0)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "tool.txt").write_text("tool\n")
    task = make_task(
        tmp_path,
        "mount-under-tmp",
        solve_sh=BESIDE_A_MOUNT_SOLVE_SH,
        test_sh=BESIDE_A_MOUNT_TEST_SH,
        verifier_mode="shared",
    )
    settings = host_settings().model_dump(mode="json")
    environment = EnvironmentConfig(
        import_path=IMPORT_PATH,
        kwargs={**settings, "read_only_binds": [f"{runtime}:/tmp/platform/runtime"]},
    )
    result = run_trial(task, tmp_path / "trials", "oracle", environment=environment)
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 1.0}
    listing = (tmp_path / "trials" / result.trial_name / "verifier" / "listing.txt").read_text()
    assert "planted" not in listing and "nested" not in listing, listing
    assert "tool.txt" in listing
