"""Partitions: one per dataset version, one per run, one per run batch (`<run>.b0000`)."""

import dagster as dg

dataset_versions = dg.DynamicPartitionsDefinition(name="dataset_versions")
runs = dg.DynamicPartitionsDefinition(name="runs")
batches = dg.DynamicPartitionsDefinition(name="batches")
