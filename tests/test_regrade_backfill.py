"""`synth run regrade --wait` end to end: the backfill it launches runs on a real Dagster
webserver, daemon and code server, and materializes every batch's `assessments` again with
the judge; Ctrl-C on a second `--wait` stops the waiting and never that regrade."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.documents import validated
from synth_pipelines.contracts.regrade import Regrade
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import read_events
from synth_pipelines.control.regrades import run_regrades
from synth_pipelines.services.dagster_graphql import DagsterWebserver, backfill_status
from tests.agent_runs import evaluate, one_task_dataset, profile_document
from tests.conftest import PROJECT_ROOT
from tests.dagster_services import SYNTH, dagster_services, finish, regrade_process
from tests.fault_injection import wait_for
from tests.live_services import platform
from tests.module_state import module_state
from tests.production_services import free_port
from tests.test_judges import judge_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

JUDGE = "judge:synth/judge@1"
ASSESSMENTS = dg.AssetKey("assessments")


@dataclass(frozen=True)
class Regraded:
    run: RunRecord
    judged: subprocess.CompletedProcess
    """`synth run regrade RUN --judge @profiles/judge.json --wait --json`, to its end."""
    interrupted: subprocess.CompletedProcess
    """`synth run regrade RUN --wait --json` (the tasks' verifiers), sent SIGINT."""
    interrupted_regrade: Regrade


@pytest.fixture(scope="module")
def regraded(tmp_path_factory) -> Iterator[Regraded]:
    root = tmp_path_factory.mktemp("regrade")
    with module_state(root), pytest.MonkeyPatch.context() as patch:
        patch.setenv("SYNTH_DAGSTER_URL", f"http://127.0.0.1:{free_port()}")
        with platform(patch) as (model_url, _proxy):
            judge_script(model_url)
            run = evaluate(
                one_task_dataset(root, "update-version-file"), profile_document("oracle.json")
            )
            waiting: list[subprocess.Popen] = []
            with dagster_services() as start_daemon:
                try:
                    judged = regrade_process(
                        run.run_id, "--judge", "@profiles/judge.json", "--wait", "--json"
                    )
                    waiting.append(judged)
                    first_line = judged.stderr.readline()
                    interrupted = regrade_process(run.run_id, "--wait", "--json")
                    waiting.append(interrupted)
                    assert interrupted.stderr.readline(), "the second regrade never began waiting"
                    interrupted.send_signal(signal.SIGINT)
                    interrupted_out, interrupted_err = interrupted.communicate(timeout=60)
                    # Started once both backfills are requested, the daemon takes them up at once.
                    start_daemon()
                    judged_out, judged_err = judged.communicate(timeout=240)
                    _, second = run_regrades(control_engine(Settings()), run.run_id)
                    yield Regraded(
                        run,
                        subprocess.CompletedProcess(
                            judged.args, judged.returncode, judged_out, first_line + judged_err
                        ),
                        subprocess.CompletedProcess(
                            interrupted.args,
                            interrupted.returncode,
                            interrupted_out,
                            interrupted_err,
                        ),
                        second,
                    )
                finally:
                    finish(waiting)


def _partitions(run: RunRecord) -> list[str]:
    return [batch_key(run.run_id, index) for index in range(run.batch_count)]


def _materializations(partition: str) -> list[tuple[dg.EventLogRecord, str | None]]:
    """Every materialization of the partition's `assessments`, oldest first, with the
    backfill whose run made it (None: a run outside any backfill)."""
    with dg.DagsterInstance.get() as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=ASSESSMENTS, asset_partitions=[partition]),
            limit=100,
            ascending=True,
        ).records
        return [
            (record, instance.get_run_by_id(record.run_id).tags.get("dagster/backfill"))
            for record in records
        ]


def _materialized_by(partition: str, backfill_id: str) -> dg.EventLogRecord | None:
    found = [record for record, backfill in _materializations(partition) if backfill == backfill_id]
    return found[-1] if found else None


def test_wait_ends_once_every_assessment_of_the_regrade_is_done(regraded):
    judged = regraded.judged
    assert judged.returncode == 0, judged.stderr
    document = json.loads(judged.stdout)
    assert document == validated("run regrade", document)
    assert (document["assessor"], document["batches"]) == (JUDGE, regraded.run.batch_count)
    lines = [json.loads(line) for line in judged.stderr.splitlines()]
    assert lines and all(line == validated("run progress", line) for line in lines)
    assert {(line["run_id"], line["kind"]) for line in lines} == {(regraded.run.run_id, "regrade")}
    last = lines[-1]
    assert last["batches_done"] == last["batches_total"] == regraded.run.batch_count
    assert last["attempts_done"] == last["attempts_total"] == 1
    assert last["passed"] == 1


def test_the_backfill_materializes_every_batch_again_with_the_judge(regraded):
    document = json.loads(regraded.judged.stdout)
    for partition in _partitions(regraded.run):
        again = wait_for(
            lambda partition=partition: _materialized_by(partition, document["backfill_id"]),
            f"the backfill's materialization of assessments {partition}",
            timeout=60,
        )
        original = _materializations(partition)[0][0]
        assert again.storage_id > original.storage_id
        assert again.timestamp > original.timestamp
        metadata = again.asset_materialization.metadata
        assert metadata["assessor"].value == JUDGE
        assert metadata["regrade"].value == document["regrade_id"]
        assert original.asset_materialization.metadata["assessor"].value == "task-verifier"


def test_run_show_assessments_lists_the_verifier_and_the_judge(regraded):
    run_id = regraded.run.run_id
    shown = subprocess.run(
        [*SYNTH, "run", "show", run_id, "--assessments", "--json"],
        cwd=PROJECT_ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document == validated("run show --assessments", document)
    regrade_id = json.loads(regraded.judged.stdout)["regrade_id"]
    sets = {entry["label"]: entry for entry in document["assessment_sets"]}
    assert {"task-verifier (in trial)", f"{JUDGE} ({regrade_id})"} <= set(sets)
    assert {entry["assessor"] for entry in sets.values()} == {"task-verifier", JUDGE}
    assert sets[f"{JUDGE} ({regrade_id})"]["assessed"] == 1


def test_ctrl_c_stops_the_waiting_and_the_regrade_goes_on(regraded):
    interrupted, regrade = regraded.interrupted, regraded.interrupted_regrade
    run_id = regraded.run.run_id
    assert interrupted.returncode == 130, interrupted.stderr
    assert interrupted.stdout == ""
    (said,) = interrupted.stderr.splitlines()
    assert said == (
        f"stopped waiting; regrade {regrade.regrade_id} of {run_id} goes on: follow it at "
        f"{Settings().gateway_url}/dagster/runs/b/{regrade.backfill_id}, then compare with "
        f"`synth run show {run_id} --assessments`"
    )
    assert regrade.assessor == "task-verifier" and regrade.backfill_id

    def assessed() -> set[str]:
        events = read_events(
            control_engine(Settings()), run_id=run_id, kinds=("regrade.batch_assessed",)
        )
        return {e.data["batch"] for e in events if e.data["regrade_id"] == regrade.regrade_id}

    wait_for(
        lambda: assessed() == set(_partitions(regraded.run)),
        f"regrade {regrade.regrade_id} assessing every batch",
        timeout=120,
    )
    assert backfill_status(DagsterWebserver(Settings().dagster_url), regrade.backfill_id) not in (
        "CANCELED",
        "CANCELING",
    )
