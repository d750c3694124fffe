"""The few Dagster GraphQL calls the gateway makes: backfills, which only the webserver
launches, and run termination.

The webserver listens on loopback (`SYNTH_DAGSTER_URL`); operators reach it only through the
gateway's `/dagster`, so these calls carry no credential of their own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import httpx

from synth_pipelines.tls import client_context

LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { stepKey invalidOutputName }
    ... on PartitionSetNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on InvalidSubsetError { message }
  }
}
"""

BACKFILL_STATUS = """
query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { id status }
    ... on PythonError { message }
    ... on BackfillNotFoundError { message }
  }
}
"""


# `__typename` says which of the query's outcomes answered; the error outcomes carry a
# message. (The functional form: a class body would mangle `__typename`.)
BackfillLaunch = TypedDict(
    "BackfillLaunch", {"__typename": str, "backfillId": str, "message": str}, total=False
)
BackfillOrError = TypedDict(
    "BackfillOrError", {"__typename": str, "id": str, "status": str, "message": str}, total=False
)


class DagsterUnavailableError(RuntimeError):
    pass


@dataclass(frozen=True)
class DagsterWebserver:
    """The webserver the gateway calls, at its loopback URL."""

    url: str


def _graphql(
    webserver: DagsterWebserver, query: str, variables: Mapping[str, object]
) -> dict[str, Any]:
    """The result's `data`: the JSON object of each field the query asked for."""
    dagster_url = webserver.url
    try:
        response = httpx.post(
            f"{dagster_url}/graphql",
            json={"query": query, "variables": variables},
            timeout=60,
            verify=client_context(),
        )
    except httpx.HTTPError as error:
        raise DagsterUnavailableError(
            f"the Dagster webserver at {dagster_url} is not reachable ({error}); start the "
            "services with `synth up`"
        ) from None
    if response.status_code in (401, 403):
        raise DagsterUnavailableError(
            f"the Dagster webserver at {dagster_url} refused the call "
            f"({response.status_code} {response.reason_phrase}); check that SYNTH_DAGSTER_URL "
            "names the webserver on loopback, not a proxy in front of it"
        )
    try:
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPStatusError, ValueError):
        raise DagsterUnavailableError(
            f"{dagster_url}/graphql answered {response.status_code} "
            f"{response.reason_phrase} without a GraphQL result; check that SYNTH_DAGSTER_URL "
            "names the Dagster webserver"
        ) from None
    if body.get("errors"):
        raise DagsterUnavailableError(
            f"Dagster refused the request: {body['errors'][0]['message']}"
        )
    data: dict[str, Any] = body["data"]
    return data


def launch_asset_backfill(
    webserver: DagsterWebserver,
    asset: str,
    partitions: list[str],
    run_config: Mapping[str, object],
    tags: dict[str, str],
    title: str,
) -> str:
    params = {
        "assetSelection": [{"path": [asset]}],
        "partitionNames": partitions,
        "runConfigData": json.dumps(run_config),
        "tags": [{"key": key, "value": value} for key, value in tags.items()],
        "title": title,
    }
    data = _graphql(webserver, LAUNCH_BACKFILL, {"params": params})
    result: BackfillLaunch = data["launchPartitionBackfill"]
    if result["__typename"] != "LaunchBackfillSuccess":
        raise DagsterUnavailableError(f"Dagster did not launch the backfill: {result}")
    return result["backfillId"]


def backfill_status(webserver: DagsterWebserver, backfill_id: str) -> str:
    data = _graphql(webserver, BACKFILL_STATUS, {"id": backfill_id})
    result: BackfillOrError = data["partitionBackfillOrError"]
    if result["__typename"] != "PartitionBackfill":
        raise DagsterUnavailableError(f"no backfill {backfill_id}: {result.get('message')}")
    return result["status"]


ACTIVE_BATCH_RUNS = """
query($run: String!) {
  runsOrError(filter: {
    tags: [{key: "synth/run", value: $run}],
    statuses: [QUEUED, NOT_STARTED, STARTING, STARTED]
  }) {
    __typename
    ... on Runs { results { runId } }
    ... on PythonError { message }
  }
}
"""

TERMINATE_RUNS = """
mutation($ids: [String!]!) {
  terminateRuns(runIds: $ids) {
    __typename
    ... on TerminateRunsResult {
      terminateRunResults {
        __typename
        ... on TerminateRunSuccess { run { runId } }
      }
    }
    ... on PythonError { message }
  }
}
"""


def terminate_batch_runs(webserver: DagsterWebserver, run_id: str) -> list[str]:
    """Terminate the queued or running Dagster runs of a synth run's batches, through the
    webserver (whose run launcher reaches the run workers); returns those terminated."""
    found = _graphql(webserver, ACTIVE_BATCH_RUNS, {"run": run_id})["runsOrError"]
    if found["__typename"] != "Runs":
        raise DagsterUnavailableError(f"Dagster did not list the runs: {found.get('message')}")
    active = [entry["runId"] for entry in found["results"]]
    if not active:
        return []
    done = _graphql(webserver, TERMINATE_RUNS, {"ids": active})["terminateRuns"]
    if done["__typename"] != "TerminateRunsResult":
        raise DagsterUnavailableError(f"Dagster did not terminate the runs: {done.get('message')}")
    return [
        result["run"]["runId"]
        for result in done["terminateRunResults"]
        if result["__typename"] == "TerminateRunSuccess"
    ]
