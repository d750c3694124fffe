"""`run_spec[run]`: the accepted experiment, pinned: dataset version, profile digests, plan."""

from typing import Any

import dagster as dg

from assets.dataset_tasks import dataset_tasks
from assets.partitions import runs
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.runs import get_run


@dg.asset(
    partitions_def=runs,
    # Which dataset version a run pins is data, not a partition rule: any version may feed it.
    deps=[dg.AssetDep(dataset_tasks, partition_mapping=dg.AllPartitionMapping())],
    group_name="inputs",
    kinds={"json"},
    description="The accepted experiment, pinned: dataset version and digest, actor (and "
    "judge) profile digests, plan and model; its batches are the `batches` partitions.",
)
# Dagster takes the result's value type for the output's: Any, as a bare MaterializeResult
# gives (None would make the output Nothing).
def run_spec(
    context: dg.AssetExecutionContext, control: ControlDatabase, objects: ObjectStoreResource
) -> dg.MaterializeResult[Any]:
    run = get_run(control.engine(), context.partition_key)
    store = objects.store()
    ref = store.put(f"runs/{run.run_id}/spec.json", run.spec.model_dump_json(indent=2).encode())
    spec = run.spec
    return dg.MaterializeResult(
        metadata={
            "kind": spec.kind,
            "dataset": spec.dataset.ref,
            "dataset_digest": spec.dataset.digest,
            "actor": f"{spec.actor.name}@{spec.actor.version}",
            "actor_digest": spec.actor.digest,
            "judge": f"{spec.judge.name}@{spec.judge.version}" if spec.judge else "",
            "request_digest": run.request_digest,
            "batches": spec.batch_count,
            "batch_partitions": batch_links(run.run_id, spec.batch_count),
            "plan": dg.MetadataValue.json(spec.plan.model_dump(mode="json")),
            "spec": dg.MetadataValue.path(store.uri(ref.key)),
        },
        data_version=dg.DataVersion(run.request_digest),
    )


def batch_links(run_id: str, count: int) -> dg.MarkdownMetadataValue:
    """Each batch partition of the run, linked to its sampling (`trials`) in the UI; relative
    links, so they hold behind the operators' proxy too."""
    keys = [batch_key(run_id, index) for index in range(count)]
    return dg.MetadataValue.md(
        "\n".join(f"- [{key}](/assets/trials?partition={key})" for key in keys)
    )
