"""`captured_interactions[batch]`: the capture proxy's published evidence of the batch's
trials (downstream of `trials`, upstream of the learning that reads it).

The proxy writes it (create-only Parquet chunks with full-object SHA-256) and reports
each chunk as a materialization of the attempt's batch, so the asset is external."""

import dagster as dg

from assets.partitions import batches

captured_interactions = dg.AssetSpec(
    "captured_interactions",
    partitions_def=batches,
    description="Exact prompt tokens, sampled tokens and sampler logprobs of every model call.",
    deps=["trials"],
    group_name="evidence",
    kinds={"parquet"},
)
