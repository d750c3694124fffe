"""Every `synth run` command: the run app with the modules that add commands to it, imported
in the order `synth run --help` lists their commands."""

from synth_pipelines.cli import run_control  # noqa: F401  (it registers)

# isort: split
from synth_pipelines.cli import exports, metrics  # noqa: F401  (they register)
from synth_pipelines.cli.runs import run_app

__all__ = ["run_app"]
