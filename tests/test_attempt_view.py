"""`synth attempt show`: one built-in agent attempt read back from its captured evidence,
its tool calls with their outputs, per call the sampler's own token counts, and its grade."""

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from synth_pipelines.cli.main import app
from synth_pipelines.config import Settings
from synth_pipelines.contracts.trial import TrialOutcome
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import evaluate, one_task_dataset, profile_document, trial_outcomes
from tests.conftest import operator_key
from tests.live_services import platform, set_script
from tests.module_state import module_state

WRITE = (
    '<tool_call>\n{"name": "bash", "arguments": {"command": '
    "\"grep -m1 -oE '^## [0-9]+\\\\.[0-9]+\\\\.[0-9]+' CHANGELOG.md | cut -d' ' -f2 > VERSION"
    " && echo '<b>written</b>'\"}}\n</tool_call>"
)


@pytest.fixture(scope="module")
def graded_attempt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrialOutcome]:
    """One evaluated attempt of the built-in agent: a bash call, then a closing sentence."""
    root = tmp_path_factory.mktemp("attempt-view")
    with module_state(root), pytest.MonkeyPatch.context() as patch:
        with platform(patch) as (model_url, proxy):
            set_script(
                model_url,
                [
                    {"match": "<tool_response>", "completion": "VERSION is set.", "repeat": True},
                    {"completion": WRITE, "repeat": True},
                ],
            )
            run = evaluate(
                one_task_dataset(root, "update-version-file"), profile_document("builtin.json")
            )
            proxy.flush()
            (outcome,) = trial_outcomes(run)
        yield outcome


def _show(*args: str):
    return CliRunner().invoke(app, ["attempt", "show", *args])


@pytest.mark.slow
def test_attempt_show_pairs_tool_calls_with_outputs_and_counts_evidence_tokens(graded_attempt):
    shown = _show(graded_attempt.attempt_id, "--json")
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["reward"] == 1.0 and document["task_name"] == "synth/update-version-file"
    (tool,) = document["tool_calls"]
    assert tool["name"] == "bash" and "CHANGELOG.md" in tool["input"]["command"]
    assert tool["output"].startswith("exit code 0") and "<b>written</b>" in tool["output"]
    assert tool["is_error"] is False
    evidence = read_attempt_evidence(
        control_engine(Settings()),
        open_object_store(Settings().objects_url),
        [graded_attempt.attempt_id],
    )
    calls = evidence.calls[graded_attempt.attempt_id]
    assert [c["call_id"] for c in document["calls"]] == [c.call_id for c in calls]
    for shown_call, call in zip(document["calls"], calls, strict=True):
        assert shown_call["prompt_tokens"] == len(call.prompt_tokens)
        assert shown_call["completion_tokens"] == len(call.completion_tokens)
        assert shown_call["chunk_key"].startswith("evidence/")
    assert tool["model_call_id"] == calls[0].call_id
    # The second call's new input is the tool's result, as the harness sent it back.
    (result_message,) = document["calls"][1]["input"]
    assert result_message["content"][0]["type"] == "tool_result"
    assert document["system"] and "coding agent" in document["system"]
    assert document["verifier_output"] is not None


@pytest.mark.slow
def test_another_owner_is_told_the_attempt_does_not_exist(graded_attempt, tmp_path, monkeypatch):
    page = tmp_path / "bob.html"
    monkeypatch.setenv("SYNTH_API_KEY", operator_key("bob"))
    shown = _show(graded_attempt.attempt_id, "--html", str(page))
    unknown = _show("no-such-attempt")
    assert shown.exit_code == unknown.exit_code == 2
    assert shown.stderr.replace(graded_attempt.attempt_id, "no-such-attempt") == unknown.stderr
    assert not page.exists()


@pytest.mark.slow
def test_attempt_show_by_prefix_writes_an_escaped_html_page(graded_attempt, tmp_path):
    page = tmp_path / "attempt.html"
    prefix = graded_attempt.attempt_id.rsplit(".", 1)[0]
    shown = _show(prefix, "--html", str(page))
    assert shown.exit_code == 0, shown.output
    assert "bash" in shown.stdout and "VERSION is set." in shown.stdout
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and graded_attempt.attempt_id in html
    assert "CHANGELOG.md" in html and "VERSION is set." in html
    assert "&lt;b&gt;written&lt;/b&gt;" in html and "<b>written</b>" not in html
    assert "src=" not in html and "href=" not in html


def test_unknown_attempt_is_one_line_exit_2_and_writes_nothing(cli_gateway, tmp_path):
    page = tmp_path / "never.html"
    shown = CliRunner().invoke(app, ["attempt", "show", "no-such-attempt", "--html", str(page)])
    assert shown.exit_code == 2
    assert len(shown.stderr.strip().splitlines()) == 1 and "no-such-attempt" in shown.stderr
    assert not page.exists()
