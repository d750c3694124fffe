"""The control database as a Dagster resource: SQLite by default, PostgreSQL by config."""

import dagster as dg
from sqlalchemy import Engine

from synth_pipelines.control.database import engine_for


class ControlDatabase(dg.ConfigurableResource["ControlDatabase"]):
    url: str

    def engine(self) -> Engine:
        return engine_for(self.url)
