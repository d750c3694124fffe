"""The one interpreter of profiles: delivery, files, env bindings, constraints."""

import json
import posixpath

import pytest

from synth_pipelines.agents.bindings import RuntimeBindings
from synth_pipelines.agents.constraints import LaunchConstraintError
from synth_pipelines.agents.launch import HOME, INSTRUCTION_STDIN, build_launch
from synth_pipelines.contracts.profile import Profile
from tests.conftest import PROJECT_ROOT

BINDINGS = RuntimeBindings(
    task="synth/t",
    run="r-1",
    attempt="r-1.b0000.g0000.a000",
    batch="r-1.b0000",
    model="synth/qwen3-tiny",
    proxy_url="http://127.0.0.1:8200",
    token="sk-synth-x.y",
    context_window="32768",
    max_output_tokens="8192",
)


def _profile(**changes) -> Profile:
    document = json.loads((PROJECT_ROOT / "profiles" / "claude-code.json").read_text())
    return Profile.model_validate({**document, **changes})


def test_claude_code_launch_routes_through_the_proxy_with_the_bound_model():
    launch = build_launch(_profile(), BINDINGS, "Do it.", "/app")
    env = dict(launch.env)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8200"
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-synth-x.y"
    for alias in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert env[alias] == "synth/qwen3-tiny"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert launch.argv[-2:] == ("--allowedTools", "Bash,Read,Edit,Write")
    assert launch.argv[launch.argv.index("--model") + 1] == "synth/qwen3-tiny"
    assert launch.stdin_path == INSTRUCTION_STDIN
    assert {f.path: f.content for f in launch.files}[INSTRUCTION_STDIN] == "Do it."
    assert posixpath.join(HOME, ".claude", "CLAUDE.md") in {f.path for f in launch.files}
    assert launch.workdir == "/app"


def test_instruction_delivery_modes():
    argument = build_launch(_profile(instruction={"mode": "argument"}), BINDINGS, "Go.", "/app")
    assert argument.argv[-1] == "Go." and argument.stdin_path is None
    as_file = build_launch(
        _profile(instruction={"mode": "file", "path": "TASK.md"}), BINDINGS, "Go.", "/app"
    )
    assert {f.path: f.content for f in as_file.files}["/app/TASK.md"] == "Go."
    assert as_file.stdin_path is None


def test_env_bindings_resolve_literals_and_runtime_values():
    profile = _profile(
        env=[{"name": "STYLE", "value": "terse"}, {"name": "WHICH", "bind": "attempt"}]
    )
    env = dict(build_launch(profile, BINDINGS, "x", "/app").env)
    assert env["STYLE"] == "terse" and env["WHICH"] == BINDINGS.attempt


def test_workdir_and_required_outputs_resolve_against_the_profile_workdir():
    launch = build_launch(
        _profile(workdir="/task", required_outputs=["out.txt", "~/notes.md"]), BINDINGS, "x", "/app"
    )
    assert launch.workdir == "/task"
    assert launch.required_outputs == ("/task/out.txt", posixpath.join(HOME, "notes.md"))


def test_placeholder_launch_records_no_secret():
    template = build_launch(_profile(), RuntimeBindings.placeholders(), "x", "/app")
    assert dict(template.env)["ANTHROPIC_AUTH_TOKEN"] == "${token}"
    assert "sk-synth" not in json.dumps(template.record())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"env": [{"name": "ANTHROPIC_BASE_URL", "value": "http://elsewhere"}]},
            "sets ANTHROPIC_BASE_URL",
        ),
        ({"env": [{"name": "ANTHROPIC_MODEL", "value": "claude-opus"}]}, "sets ANTHROPIC_MODEL"),
        ({"args": ["--model", "claude-opus"]}, "passes --model"),
        ({"args": ["--model=claude-opus"]}, "passes --model"),
        (
            {"files": [{"path": "~/.claude/settings.json", "content": '{"model": "opus"}'}]},
            "sets 'model'",
        ),
        (
            {
                "files": [
                    {
                        "path": ".claude/settings.json",
                        "content": '{"env": {"ANTHROPIC_BASE_URL": "x"}}',
                    }
                ]
            },
            "sets ANTHROPIC_BASE_URL",
        ),
        (
            {
                "files": [
                    {"path": ".claude/settings.json", "content": '{"apiKeyHelper": "cat key"}'}
                ]
            },
            "apiKeyHelper",
        ),
        ({"engine_version": "2.0.0"}, "pins claude-code 2.0.0"),
    ],
)
def test_conflicting_routing_or_model_settings_are_rejected(changes, message):
    with pytest.raises(LaunchConstraintError, match=message):
        build_launch(_profile(**changes), BINDINGS, "x", "/app")


def test_other_native_settings_keep_the_harness_hierarchy():
    settings = (
        '{"permissions": {"allow": ["Bash(ls:*)"]}, "env": {"BASH_DEFAULT_TIMEOUT_MS": "5000"}}'
    )
    launch = build_launch(
        _profile(files=[{"path": ".claude/settings.json", "content": settings}]),
        BINDINGS,
        "x",
        "/app",
    )
    assert {f.path: f.content for f in launch.files}["/app/.claude/settings.json"] == settings


def _limited(value: str) -> Profile:
    return _profile(env=[{"name": "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "value": value}])


def test_a_profile_may_lower_the_output_limit_but_never_raise_it():
    lowered = dict(build_launch(_limited("48"), BINDINGS, "x", "/app").env)
    assert lowered["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "48"
    raised = dict(build_launch(_limited("100000"), BINDINGS, "x", "/app").env)
    assert raised["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == BINDINGS.max_output_tokens
    # The launch's record keeps the recipe's choice in place of the model's placeholder.
    template = build_launch(_limited("48"), RuntimeBindings.placeholders(), "x", "/app")
    assert dict(template.env)["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "48"


@pytest.mark.parametrize("value", ["lots", "0", "-5", "4.5"])
def test_an_output_limit_that_is_not_a_positive_whole_number_is_refused(value):
    with pytest.raises(LaunchConstraintError, match="may only lower the model's output limit"):
        build_launch(_limited(value), BINDINGS, "x", "/app")


def test_a_count_of_tokens_is_not_taken_for_a_secret_but_a_token_is():
    assert _limited("48").env[0].value == "48"
    with pytest.raises(ValueError, match="looks like a secret"):
        _profile(env=[{"name": "GITHUB_TOKEN", "value": "ghp_x"}])
