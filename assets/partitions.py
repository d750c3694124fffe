"""Partitions: one per dataset version, one per run, one per run batch (`<run>.b0000`)."""

import dagster as dg

dataset_versions = dg.DynamicPartitionsDefinition(name="dataset_versions")
RUNS = "runs"
"""The runs' partitions by name, as the Dagster instance's partition calls take them."""
runs = dg.DynamicPartitionsDefinition(name=RUNS)
batches = dg.DynamicPartitionsDefinition(name="batches")
