"""The `synth` command: one Typer app, one sub-app per noun, each loaded when invoked."""

from __future__ import annotations

import typer

from synth_pipelines.cli.command_group import SynthGroup
from synth_pipelines.cli.lazy_commands import CommandSource

PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}

COMMANDS = {
    "schema": CommandSource(
        "synth_pipelines.cli.schemas:schema_command",
        "Print the JSON Schema of a command's --json output (a JSON object).",
    ),
    "claude": CommandSource(
        "synth_pipelines.cli.agents:claude",
        "Launch the installed Claude Code here, through the capture proxy (args after --), "
        "with a session token the gateway mints for your key's owner and this model.",
        PASS_THROUGH,
    ),
    "up": CommandSource(
        "synth_pipelines.cli.services:up",
        "Start the embedded services unless they run: model service, proxy, gateway, Dagster "
        "code server, daemon and UI (--production: the production-shaped deployment).",
    ),
    "down": CommandSource(
        "synth_pipelines.cli.services:down",
        "Stop the embedded services (--production: the production-shaped deployment, whose "
        "data stays for the next `synth up --production`).",
    ),
    "dataset": CommandSource(
        "synth_pipelines.cli.datasets:dataset_app",
        "Publish and inspect immutable dataset versions.",
    ),
    "run": CommandSource(
        "synth_pipelines.cli.run_commands:run_app", "Submit experiments and inspect their runs."
    ),
    "train": CommandSource(
        "synth_pipelines.cli.train:train_app", "Train a model from task experience."
    ),
    "model": CommandSource(
        "synth_pipelines.cli.model:model_app",
        "The local Tinker-compatible model service (sampling and LoRA training).",
    ),
    "agent": CommandSource(
        "synth_pipelines.cli.agents:agent_app",
        "Run an agent profile on a task in the local sandbox.",
    ),
    "profile": CommandSource(
        "synth_pipelines.cli.profiles:profile_app",
        "Publish and inspect immutable agent profiles.",
    ),
    "proxy": CommandSource(
        "synth_pipelines.cli.proxy:proxy_app", "The capture proxy and its scoped tokens."
    ),
    "image": CommandSource(
        "synth_pipelines.cli.images:image_app",
        "Inspect, build and prune the images tasks' Dockerfiles are built into.",
    ),
    "checkpoint": CommandSource(
        "synth_pipelines.cli.checkpoints:checkpoint_app",
        "Checkpoints: what produced each one, and what sampled through it since.",
    ),
    "attempt": CommandSource(
        "synth_pipelines.cli.attempts:attempt_app",
        "Read one attempt: its conversation and its grade.",
    ),
    "admin": CommandSource(
        "synth_pipelines.cli.admin:admin_app",
        "Administer the deployment: operators' API keys, organizations' limits.",
    ),
    "gateway": CommandSource(
        "synth_pipelines.cli.gateway:gateway_app",
        "The gateway operators reach the platform through.",
    ),
    "ui": CommandSource(
        "synth_pipelines.cli.ui:ui",
        "Print a one-time link that signs a browser in to the Dagster UI (admins' keys).",
    ),
    "pool": CommandSource(
        "synth_pipelines.cli.pools:pool_app",
        "The worker pool every run's attempts are admitted against: its budget and leases.",
    ),
}


class SynthCommands(SynthGroup):
    commands_by_name = COMMANDS


app = typer.Typer(
    name="synth",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=SynthCommands,
)


@app.callback()
def synth() -> None:
    """Run, evaluate and train tool-using coding agents on versioned Harbor datasets."""
