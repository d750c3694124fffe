"""Text an agent chose reaches operators inert: `synth run show` and `synth attempt show`
print escape sequences and Rich markup as visible characters (never as terminal controls,
never as markup that crashes the view), and `synth run export --format csv` writes no cell
a spreadsheet would run as a formula."""

from __future__ import annotations

import io
import json

import polars as pl
import pyarrow as pa
import pytest
from rich.console import Console
from typer.testing import CliRunner

from synth_pipelines.cli import attempts
from synth_pipelines.cli.main import app
from synth_pipelines.cli.output import inert
from synth_pipelines.runtime.run_tables import write_table
from tests.test_run_summary import _record
from tests.test_run_summary import _run as three_batch_evaluation

pytestmark = pytest.mark.usefixtures("cli_gateway")

# Clear the screen, retitle the window, ring the bell, overwrite the line, reverse the text.
HOSTILE = "[/]\x1b[2J\x1b]0;owned\x07done\rpassed \u202eelif"
CONTROLS = ("\x1b", "\x07", "\r", "\u202e")


def _plain_console() -> tuple[Console, io.StringIO]:
    """A console that adds no styling of its own: any control character printed came from
    the text."""
    buffer = io.StringIO()
    return Console(file=buffer, color_system=None, width=200, force_terminal=False), buffer


def test_inert_text_shows_every_control_character_and_markup_as_written():
    console, buffer = _plain_console()
    console.print(inert(HOSTILE))
    printed = buffer.getvalue()
    assert not any(control in printed for control in CONTROLS)
    assert printed.rstrip("\n") == "[/]\\x1b[2J\\x1b]0;owned\\x07done\\x0dpassed \\u202eelif"
    assert inert("two\n\tlines") == "two\n\tlines"


def test_run_show_prints_a_hostile_error_reason_instead_of_crashing(state, tmp_path):
    run = three_batch_evaluation(tmp_path)
    _record(run, 0, [1.0, None], errors={1: f"SandboxPathError: /logs/verifier/{HOSTILE}"})
    shown = CliRunner().invoke(app, ["run", "show", run.run_id])
    assert shown.exit_code in (0, 1), shown.output
    # The reason's first line, up to the carriage return.
    assert "/logs/verifier/[/]\\x1b[2J\\x1b]0;owned\\x07done" in shown.stdout
    assert not any(control in shown.output for control in CONTROLS)


def test_attempt_show_prints_agent_text_without_its_escape_sequences(monkeypatch):
    console, buffer = _plain_console()
    monkeypatch.setattr(attempts, "console", console)
    tool = {"tool_use_id": "t1", "name": f"bash{HOSTILE}", "input": {"command": HOSTILE}}
    attempts._render(
        {
            "attempt_id": "r-1.b0000.a0",
            "task_name": f"synth/{HOSTILE}",
            "status": "completed",
            "reward": 0.0,
            "system": HOSTILE,
            "calls": [
                {
                    "call_index": 0,
                    "agent_id": HOSTILE,
                    "prompt_tokens": 3,
                    "completion_tokens": 2,
                    "stop_reason": "tool_use",
                    "chunk_key": "evidence/0",
                    "input": [{"role": "user", "content": [{"type": "text", "text": HOSTILE}]}],
                    "output": [{"type": "text", "text": HOSTILE}, {"type": "tool_use", "id": "t1"}],
                }
            ],
            "tool_calls": [{**tool, "output": HOSTILE}],
            "verifier_output": HOSTILE,
            "rationale": HOSTILE,
        }
    )
    printed = buffer.getvalue()
    assert not any(control in printed for control in CONTROLS)
    # Each of the nine places given the text shows it; the tool's input, as JSON, escapes it.
    assert printed.count("[/]\\x1b[2J\\x1b]0;owned") == 9
    assert json.dumps({"command": HOSTILE}) in printed


@pytest.mark.parametrize(
    "cell", ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]
)
def test_csv_cells_that_would_start_a_formula_are_quoted(tmp_path, cell):
    out = tmp_path / "evidence.csv"
    table = pa.table({"agent_type": [cell, "reviewer"], "tokens": [[1, 2], [3]], "n": [-1, 2]})
    write_table(table, out, "csv")
    frame = pl.read_csv(out)
    assert frame["agent_type"].to_list() == [f"'{cell}", "reviewer"]
    assert frame["n"].to_list() == [-1, 2] and frame["tokens"].to_list() == ["[1, 2]", "[3]"]
