"""The object store as a Dagster resource: local directory by default, S3 by config."""

import dagster as dg

from synth_pipelines.storage.objectstore import ObjectStore, open_object_store


class ObjectStoreResource(dg.ConfigurableResource["ObjectStoreResource"]):
    url: str
    endpoint_url: str | None = None

    def store(self) -> ObjectStore:
        return open_object_store(self.url, endpoint_url=self.endpoint_url)
