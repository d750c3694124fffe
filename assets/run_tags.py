"""The Dagster run tags of every run launched for an accepted run: which run, whose, and what
it evaluates or trains (dataset, actor, model, idempotency key), so the Runs page filters by
them."""

from synth_pipelines.contracts.dagster_tags import OWNER_TAG
from synth_pipelines.contracts.run_record import RunRecord

UNBOUND_MODEL = "served base model"
"""The `synth/model` tag of a run whose actor names no model: it samples the served base."""


def run_tags(run: RunRecord) -> dict[str, str]:
    spec = run.spec
    return {
        "synth/run": run.run_id,
        OWNER_TAG: run.owner,
        "synth/kind": run.kind,
        "synth/dataset": spec.dataset.ref,
        "synth/actor": f"{spec.actor.name}@{spec.actor.version}",
        "synth/model": spec.actor_model or UNBOUND_MODEL,
        "synth/idempotency_key": run.idempotency_key,
    }
