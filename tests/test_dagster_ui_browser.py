"""The Dagster UI in a real browser (Debian's chromium driven by Playwright), served by a real
webserver over the state a one-batch training run left: the asset graph reads as one lineage
in stage groups, a checkpoint's page draws its reward curve, and the Launchpad offers a
launch config that works, the checkpoint field included."""

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from synth_pipelines.contracts.run_spec import batch_key
from tests.conftest import PROJECT_ROOT
from tests.live_services import platform
from tests.production_services import free_port
from tests.training_runs import (
    accept_training,
    run_batch,
    script_one_right_one_wrong,
    training_dataset,
)

CHROMIUM = shutil.which("chromium")
PLAN = {
    "groups_per_batch": 2,
    "attempts_per_group": 2,
    "batches": 1,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 2, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
STAGE_GROUPS = ("inputs", "warm_start", "sampling", "evaluation", "evidence", "learning")


@contextmanager
def dagster_webserver() -> Iterator[str]:
    """The project's workspace served on a free port, over this test's state."""
    port = free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "dagster-webserver"),
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DAGSTER_HOME": os.environ["DAGSTER_HOME"]},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/server_info", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("the Dagster webserver did not answer within 60 s")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def trained_run(state, tmp_path, monkeypatch) -> str:
    """A one-batch training run, materialized through the batch job; returns its batch key."""
    with platform(monkeypatch) as (model_url, _proxy):
        run = accept_training(training_dataset(tmp_path), PLAN)
        script_one_right_one_wrong(model_url)
        result = run_batch(run, 0)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
    return batch_key(run.run_id, 0)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed; run `make setup`")
def test_asset_graph_checkpoint_page_and_launchpad_in_a_browser(trained_run, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    with dagster_webserver() as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(30_000)

        # Dagster greets a new browser with a newsletter dialog over the page, at some point.
        skip = page.get_by_role("button", name="Skip")
        page.add_locator_handler(skip, lambda button: button.click())

        def visit(path: str) -> None:
            page.goto(url + path)

        def keep(name: str) -> None:
            # What each page looked like, beside the test's state, for a person to review.
            page.screenshot(path=tmp_path / f"{name}.png", full_page=True)

        visit("/asset-groups")
        for group in STAGE_GROUPS:
            expect(page.get_by_text(group, exact=True).first).to_be_visible()
        keep("asset-groups")

        # One lineage: everything from the dataset to the checkpoint is upstream of it.
        visit("/assets/checkpoints?view=lineage&lineageScope=upstream&lineageDepth=10")
        for asset in ("dataset_tasks", "run_spec", "warm_start", "policy", "trials", "datums"):
            expect(page.get_by_text(asset, exact=True).first).to_be_visible()
        keep("checkpoint-lineage")

        visit(f"/assets/checkpoints?view=partitions&partition={trained_run}")
        reward = page.locator('img[alt="reward curve"]')
        expect(reward).to_be_visible()
        assert reward.get_attribute("src").startswith("data:image/svg+xml;base64,")
        expect(page.locator('img[alt="kl curve"]')).to_be_visible()
        expect(page.get_by_text("[Show Markdown]")).to_have_count(0)
        expect(page.get_by_text(".png")).to_have_count(0)
        expect(page.get_by_text("nothing in this run (its last batch)")).to_be_visible()
        keep("checkpoint-partition")

        # A batch's trials name the attempt view, with the batch's own attempt ids.
        visit(f"/assets/trials?view=partitions&partition={trained_run}")
        expect(page.get_by_text("synth attempt show ATTEMPT --html").first).to_be_visible()
        expect(page.get_by_text(f"{trained_run}.").first).to_be_visible()
        keep("trials-partition")

        visit("/locations/synth_pipelines/jobs/launch_experiment/playground")
        editor = page.locator(".CodeMirror")
        expect(editor).to_contain_text("dataset: synth/sample@v1")
        expect(editor).to_contain_text("@profiles/oracle.json")
        expect(editor).to_contain_text("@plans/eval.json")
        expect(page.get_by_text("No errors")).to_be_visible()
        keep("launchpad")
        # The checkpoint field is part of the schema: the editor accepts it, and not a typo.
        page.wait_for_timeout(2000)  # the greeting dialog, if it comes, comes now
        editor.get_by_text("@plans/eval.json").click()
        page.keyboard.press("End")
        page.keyboard.press("Enter")
        page.keyboard.type("modle: tinker://a-checkpoint")
        expect(page.get_by_text("unexpected config entry").first).to_be_visible()
        page.keyboard.press("Home")
        page.keyboard.press("Shift+End")
        page.keyboard.type("model: tinker://a-checkpoint")
        expect(page.get_by_text("No errors")).to_be_visible()
        browser.close()
