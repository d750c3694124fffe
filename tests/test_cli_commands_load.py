"""The root lists each command by its one-line help without importing it; invoked, each
loads from its module with that same help, and `synth --help` imports none of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synth_pipelines.cli.main import COMMANDS


def _words(text: str | None) -> str:
    return " ".join((text or "").split())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_command_loads_with_the_help_the_root_shows(name):
    loaded = COMMANDS[name].load(name)
    assert _words(loaded.help) == _words(COMMANDS[name].help)


def test_help_imports_no_command_module():
    probe = (
        "import sys\n"
        "from synth_pipelines.cli.main import app\n"
        "try:\n"
        "    app(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n' + __import__('json').dumps(sorted(m for m in sys.modules "
        "if m.startswith('synth_pipelines.cli.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    imported = set(json.loads(done.stdout.strip().splitlines()[-1]))
    modules = {source.target.split(":")[0] for source in COMMANDS.values()}
    assert not imported & modules, imported & modules
    assert "attempt" in done.stdout and "checkpoint" in done.stdout
