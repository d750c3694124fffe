"""The Dagster run tags the platform reads back, not only writes for the Runs page."""

OWNER_TAG = "synth/owner"
"""Whose a Dagster run is: `launch_experiment` submits its experiment as this owner. The
gateway sets it on every run launched through it to the launching key's owner
(`gateway/dagster_launches.py`); the platform's own sensors set it to the run's owner."""
