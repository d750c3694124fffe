"""`policy[batch]`: the sampler snapshot bound to the batch (S0, S1, ...).

For a training run, batch k > 0 is bound to the checkpoint batch k-1 committed; the
asset fails, naming the missing checkpoint, if it is not there yet. The sensor admits
batch k+1 only after checkpoint k, and this is the guard against any other launch."""

import dagster as dg
import pyarrow as pa

from assets.partitions import batches
from assets.run_spec import run_spec
from assets.warm_start import warm_start
from resources.control_database import ControlDatabase
from synth_pipelines.contracts.learning import PolicyBinding
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.control.runs import get_run
from synth_pipelines.learning.policy import PolicyGateError, bind_policy


@dg.asset(
    partitions_def=batches,
    # A batch belongs to one run and may start from any warm start's checkpoint (`--model`):
    # which one is data, so both dependencies span all of their partitions.
    deps=[
        dg.AssetDep(run_spec, partition_mapping=dg.AllPartitionMapping()),
        dg.AssetDep(warm_start, partition_mapping=dg.AllPartitionMapping()),
    ],
    io_manager_key="table_io",
    group_name="sampling",
    kinds={"tinker"},
    description="The sampler the batch samples through: the run's model for batch 0 (a base "
    "model or a warm start's checkpoint), the checkpoint of batch k-1 for a training batch k.",
)
def policy(context: dg.AssetExecutionContext, control: ControlDatabase) -> dg.Output[pa.Table]:
    run_id, index = parse_batch_key(context.partition_key)
    spec = get_run(control.engine(), run_id).spec
    try:
        binding = bind_policy(control.engine(), spec, index)
    except PolicyGateError as error:
        raise dg.Failure(description=str(error)) from None
    return dg.Output(
        PolicyBinding.to_table([binding]),
        metadata={
            "sampler": binding.sampler,
            "base_model": binding.base_model,
            "source": binding.source,
            "trainer_state": binding.trainer_state or "",
        },
    )
