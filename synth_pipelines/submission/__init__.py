"""Accepting a run: reading its actor, judge, plan and dataset, checking them against each
other (a warm start's demonstrations included), and recording it. Above the runtime and
learning, which it checks a submission against; below the CLI and the Dagster launchers."""
