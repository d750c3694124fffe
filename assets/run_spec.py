"""`run_spec[run]`: the accepted experiment, pinned: dataset version, profile digests, plan."""

import dagster as dg

from assets.partitions import runs
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from synth_pipelines.control.runs import get_run


@dg.asset(partitions_def=runs, group_name="runs", kinds={"json"})
def run_spec(
    context: dg.AssetExecutionContext, control: ControlDatabase, objects: ObjectStoreResource
) -> dg.MaterializeResult:
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
            "plan": dg.MetadataValue.json(spec.plan.model_dump(mode="json")),
            "spec": dg.MetadataValue.path(store.uri(ref.key)),
        },
        data_version=dg.DataVersion(run.request_digest),
    )
