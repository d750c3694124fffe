"""An IO manager for Parquet tables in the object store, create-only and checksummed."""

import dagster as dg
import pyarrow as pa

from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from synth_pipelines.control.table_outputs import load_table, store_table


def _partition(context: dg.OutputContext | dg.InputContext) -> str:
    return context.partition_key if context.has_partition_key else "all"


class TableIOManager(dg.ConfigurableIOManager):
    objects: dg.ResourceDependency[ObjectStoreResource]
    control: dg.ResourceDependency[ControlDatabase]

    def handle_output(self, context: dg.OutputContext, obj: pa.Table) -> None:
        asset = context.asset_key.to_user_string()
        store = self.objects.store()
        ref = store_table(self.control.engine(), store, asset, _partition(context), obj)
        context.add_output_metadata(
            {
                "dagster/row_count": obj.num_rows,
                "object": dg.MetadataValue.path(store.uri(ref.key)),
                "sha256": ref.sha256,
                "bytes": ref.size,
            }
        )

    def load_input(self, context: dg.InputContext) -> pa.Table:
        return load_table(
            self.control.engine(),
            self.objects.store(),
            context.asset_key.to_user_string(),
            _partition(context),
        )
