"""A learning curve as Dagster metadata: the PNG kept in the object store and shown inline."""

import base64

import dagster as dg

from synth_pipelines.storage.objectstore import ObjectStore


def curve_metadata(store: ObjectStore, key: str, png: bytes, name: str) -> dict:
    ref = store.put(key, png)
    inline = base64.b64encode(png).decode()
    return {
        name: dg.MetadataValue.md(f"![{name.replace('_', ' ')}](data:image/png;base64,{inline})"),
        f"{name}_png": dg.MetadataValue.path(store.uri(ref.key)),
    }
