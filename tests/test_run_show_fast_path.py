"""`synth run show RUN --json` answered at start-up from the kept document only while
nothing it reads has changed: byte for byte what the full command printed, and after any
change to the run, its events, tallies, policy updates, the store's address, the owner or
the code, the full command again."""

from __future__ import annotations

import subprocess
import sys

import pytest
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
from tests.recorded_batches import accept_recorded_training, record_batch
from tests.test_run_summary import _record
from tests.test_run_summary import _run as three_batch_evaluation


def _full(run_id: str) -> str:
    result = CliRunner().invoke(app, ["run", "show", run_id, "--json"])
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def _kept(run_id: str, capsys) -> tuple[int | None, str]:
    capsys.readouterr()
    code = answered(["run", "show", run_id, "--json"])
    return code, capsys.readouterr().out


@pytest.fixture
def training(state, tmp_path):
    run = accept_recorded_training(tmp_path)
    record_batch(run, 0)
    return run


def test_a_second_read_prints_what_the_full_command_printed(training, capsys):
    printed = _full(training.run_id)
    assert _kept(training.run_id, capsys) == (0, printed)


def _stop_event(run, monkeypatch):
    record_event(control_engine(Settings()), run.run_id, "run.failed", {"reason": "a test says so"})


def _new_update(run, monkeypatch):
    mark_unresolved(control_engine(Settings()), run.run_id, batch_key(run.run_id, 2), 2, datums=3)


def _stopped(run, monkeypatch):
    interrupt_run(control_engine(Settings()), run.run_id, "a test stops it", {})


def _other_store(run, monkeypatch):
    monkeypatch.setenv("SYNTH_OBJECT_STORE_URL", "s3://another-bucket")


def _other_owner(run, monkeypatch):
    monkeypatch.setenv("SYNTH_OWNER", "someone-else")


def _lower_case_setting(run, monkeypatch):
    monkeypatch.setenv("synth_owner", "local")


@pytest.mark.parametrize(
    "change",
    [
        _stop_event,
        _new_update,
        _stopped,
        _other_store,
        _other_owner,
        _lower_case_setting,
    ],
)
def test_any_change_sends_the_read_to_the_full_command(training, capsys, monkeypatch, change):
    _full(training.run_id)
    change(training, monkeypatch)
    assert _kept(training.run_id, capsys) == (None, "")


def test_a_batch_under_way_changes_nothing_the_document_holds(training, capsys):
    _full(training.run_id)
    record_batch(training, 1, learned=False)  # started, its attempts finished, no tally yet
    assert _kept(training.run_id, capsys) == (0, _full(training.run_id))


def test_a_new_tally_sends_the_read_to_the_full_command(state, tmp_path, capsys):
    run = three_batch_evaluation(tmp_path)
    _record(run, 0, [1.0, 0.0])
    _full(run.run_id)
    assert _kept(run.run_id, capsys)[0] == 0
    _record(run, 1, [1.0, 1.0])
    assert _kept(run.run_id, capsys) == (None, "")
    printed = _full(run.run_id)
    assert '"batches_done": 2' in printed
    assert _kept(run.run_id, capsys) == (0, printed)


def test_changed_code_sends_the_read_to_the_full_command(training, capsys, monkeypatch, tmp_path):
    _full(training.run_id)
    package = tmp_path / "package"
    for part in run_document_fingerprint.CODE:
        (package / part).mkdir(parents=True)
        for source in (run_document_fingerprint.PACKAGE / part).glob("*.py"):
            (package / part / source.name).write_bytes(source.read_bytes())
    monkeypatch.setattr(run_document_fingerprint, "PACKAGE", package)
    assert _kept(training.run_id, capsys)[0] == 0
    with (package / "runtime" / "results.py").open("a") as source:
        source.write("# a changed line\n")
    assert _kept(training.run_id, capsys) == (None, "")


def test_a_stopped_run_still_exits_1(training, capsys):
    interrupt_run(control_engine(Settings()), training.run_id, "a test stops it", {})
    printed = _full(training.run_id)
    assert _kept(training.run_id, capsys) == (1, printed)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "show", "PREFIX", "--json"],
        ["run", "show", "RUN"],
        ["run", "show", "RUN", "--json", "--assessments"],
        ["run", "events", "RUN", "--json"],
    ],
)
def test_other_reads_go_to_the_full_command(training, capsys, argv):
    _full(training.run_id)
    wanted = {"RUN": training.run_id, "PREFIX": training.run_id[:6]}
    assert answered([wanted.get(arg, arg) for arg in argv]) is None
    assert capsys.readouterr().out == ""


def test_the_executable_answers_without_loading_the_cli(training):
    printed = _full(training.run_id)
    probe = (
        "import sys\n"
        "from synth_pipelines.cli.entry import main\n"
        f"sys.argv = ['synth', 'run', 'show', {training.run_id!r}, '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    print(exit.code, sorted({'typer', 'pydantic', 'sqlalchemy'} & set(sys.modules)),"
        " file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout == printed
    assert done.stderr.strip() == "0 []"
