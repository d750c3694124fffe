"""Every `synth run` command: the run app with the modules that add commands to it."""

from synth_pipelines.cli import exports, metrics, run_control  # noqa: F401  (they register)
from synth_pipelines.cli.runs import run_app

__all__ = ["run_app"]
