"""The `synth` command: one Typer app, one sub-app per noun."""

from __future__ import annotations

import typer

from synth_pipelines.cli.agents import agent_app, claude
from synth_pipelines.cli.command_group import SynthGroup
from synth_pipelines.cli.datasets import dataset_app
from synth_pipelines.cli.images import image_app
from synth_pipelines.cli.model import model_app
from synth_pipelines.cli.profiles import profile_app
from synth_pipelines.cli.proxy import proxy_app
from synth_pipelines.cli.run_control import run_app
from synth_pipelines.cli.schemas import schema_command
from synth_pipelines.cli.services import services_app
from synth_pipelines.cli.train import train_app

app = typer.Typer(
    name="synth",
    help="Run, evaluate and train tool-using coding agents on versioned Harbor datasets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=SynthGroup,
)
app.add_typer(dataset_app, name="dataset")
app.add_typer(run_app, name="run")
app.add_typer(train_app, name="train")
app.command("schema")(schema_command)
app.add_typer(model_app, name="model")
app.add_typer(agent_app, name="agent")
app.command(
    "claude",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)(claude)
app.add_typer(profile_app, name="profile")
app.add_typer(proxy_app, name="proxy")
app.add_typer(image_app, name="image")
app.registered_commands.extend(services_app.registered_commands)
