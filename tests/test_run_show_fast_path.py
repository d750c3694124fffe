"""`synth run show RUN --json` answered at start-up through the gateway with the standard
library only, byte for byte what the full command prints; and the gateway's kept document,
answered while nothing it reads has changed and built again after any change to the run,
its events, tallies, policy updates or the code."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.cli.run_show_fast import answered
from synth_pipelines.config import Settings
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control import run_document_fingerprint
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.events import record_event
from synth_pipelines.control.policy_updates import mark_unresolved
from synth_pipelines.control.run_lifecycle import interrupt_run
from synth_pipelines.control.schema import run_documents
from tests.recorded_batches import accept_recorded_training, record_batch
from tests.test_run_summary import _record
from tests.test_run_summary import _run as three_batch_evaluation

pytestmark = pytest.mark.usefixtures("cli_gateway")


def _full(run_id: str) -> str:
    result = CliRunner().invoke(app, ["run", "show", run_id, "--json"])
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def _fast(run_id: str, capsys) -> tuple[int | None, str]:
    capsys.readouterr()
    code = answered(["run", "show", run_id, "--json"])
    return code, capsys.readouterr().out


def _builds(run_id: str) -> str:
    """When the gateway last built the run's document."""
    with control_engine(Settings()).connect() as conn:
        return str(
            conn.execute(
                select(run_documents.c.stored_at).where(run_documents.c.run_id == run_id)
            ).scalar_one()
        )


@pytest.fixture
def training(state, tmp_path):
    run = accept_recorded_training(tmp_path)
    record_batch(run, 0)
    return run


def test_the_fast_path_prints_what_the_full_command_prints(training, capsys):
    printed = _full(training.run_id)
    assert _fast(training.run_id, capsys) == (0, printed)
    assert _fast(training.run_id[:8], capsys) == (0, printed)


def test_an_unchanged_run_is_answered_from_the_kept_document(training):
    _full(training.run_id)
    built = _builds(training.run_id)
    record_batch(training, 1, learned=False)  # started, its attempts finished, no tally yet
    _full(training.run_id)
    assert _builds(training.run_id) == built


def _stop_event(run):
    record_event(control_engine(Settings()), run.run_id, "run.failed", {"reason": "a test says so"})


def _new_update(run):
    mark_unresolved(control_engine(Settings()), run.run_id, batch_key(run.run_id, 2), 2, datums=3)


def _stopped(run):
    interrupt_run(control_engine(Settings()), run.run_id, "a test stops it", {})


@pytest.mark.parametrize("change", [_stop_event, _new_update, _stopped])
def test_any_change_builds_the_document_again(training, capsys, change):
    before = _full(training.run_id)
    built = _builds(training.run_id)
    change(training)
    code, after = _fast(training.run_id, capsys)
    assert _builds(training.run_id) != built
    assert after == _full(training.run_id)
    if change is _stopped:
        assert (code, json.loads(after)["status"]) == (1, "interrupted") and after != before


def test_a_new_tally_is_in_the_next_answer(state, tmp_path, capsys):
    run = three_batch_evaluation(tmp_path)
    _record(run, 0, [1.0, 0.0])
    assert '"batches_done": 1' in _fast(run.run_id, capsys)[1]
    _record(run, 1, [1.0, 1.0])
    assert '"batches_done": 2' in _fast(run.run_id, capsys)[1]


def test_a_document_kept_by_other_code_is_built_again(training, monkeypatch):
    _full(training.run_id)
    built = _builds(training.run_id)
    _full(training.run_id)
    assert _builds(training.run_id) == built
    # A gateway of another version (its code read once, when it first answers).
    monkeypatch.setattr(run_document_fingerprint, "code_digest", lambda: "another version")
    _full(training.run_id)
    assert _builds(training.run_id) != built


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "show", "RUN"],
        ["run", "show", "RUN", "--json", "--assessments"],
        ["run", "events", "RUN", "--json"],
    ],
)
def test_other_reads_go_to_the_full_command(training, capsys, argv):
    wanted = {"RUN": training.run_id}
    assert answered([wanted.get(arg, arg) for arg in argv]) is None
    assert capsys.readouterr().out == ""


def test_a_refusal_goes_to_the_full_command_which_says_why(training, capsys, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", "synth_0123456789abcdef_wrong")
    assert _fast(training.run_id, capsys) == (None, "")
    result = CliRunner().invoke(app, ["run", "show", training.run_id, "--json"])
    assert result.exit_code == 2 and result.stdout.startswith("{")
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_another_owners_run_is_not_answered(training, capsys, cli_gateway):
    cli_gateway.act_as("someone-else")
    assert _fast(training.run_id, capsys) == (None, "")


def test_the_executable_answers_without_loading_the_cli(training):
    printed = _full(training.run_id)
    probe = (
        "import sys\n"
        "from synth_pipelines.cli.entry import main\n"
        f"sys.argv = ['synth', 'run', 'show', {training.run_id!r}, '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    print(exit.code, sorted({'typer', 'pydantic', 'sqlalchemy', 'httpx'} & "
        "set(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout == printed
    assert done.stderr.strip() == "0 []"
