"""`synth run metrics`: a run's per-batch series, as a table, a JSON document or CSV."""

from __future__ import annotations

import csv
import sys

import typer

from synth_pipelines.cli.batch_learning import reward_trend, series_table
from synth_pipelines.cli.gateway_client import GatewayClient
from synth_pipelines.cli.output import JSON_OPTION, console, emit, fail, user_errors
from synth_pipelines.cli.runs import my_run, run_app
from synth_pipelines.contracts.documents import BatchMetricsDocument


@run_app.command("metrics")
def metrics(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    as_csv: bool = typer.Option(
        False, "--csv", help="CSV on stdout: a header row, then one row per batch."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """One row per batch: attempts, passes and reward mean, and for a training run the
    sampler, groups used/dropped, datums, sampled tokens, whether the optimizer step was
    applied and the sampler/trainer KL (null for a run that does not train)."""
    if as_csv and as_json:
        fail("give at most one of --json and --csv")
    client = GatewayClient(ctx.obj)
    run_id = my_run(client, run_id).run_id
    with user_errors():
        document = client.request("GET", f"/v1/runs/{run_id}/metrics")
    series = document["batches"]
    if as_csv:
        writer = csv.DictWriter(
            sys.stdout, fieldnames=list(BatchMetricsDocument.model_fields), lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(series)
        return

    def render() -> None:
        console.print(series_table(series))
        trend = reward_trend(series)
        if trend is not None:
            console.print(trend, highlight=False)

    emit("run metrics", document, as_json, render)
