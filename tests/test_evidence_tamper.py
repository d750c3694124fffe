"""A published evidence object changed after the fact is caught before it can teach.

A real training batch samples through the capture proxy and publishes its evidence;
then one byte of one group's published Parquet object is flipped in the file object
store. Qualifying the batch must fail the blocking `evidence_integrity` check, naming
the object, and exclude the affected attempt and its group with a checksum-mismatch
reason, while the untouched group still qualifies.
"""

import dagster as dg
import pytest
from sqlalchemy import select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import evidence_chunks
from synth_pipelines.definitions import definitions
from synth_pipelines.evidence.flush import flush_evidence
from synth_pipelines.storage.objectstore import open_object_store
from tests.live_services import platform
from tests.training_runs import accept_training, script_one_right_one_wrong, training_dataset

PLAN = {
    "groups_per_batch": 2,
    "attempts_per_group": 2,
    "batches": 1,
    "learning_rate": 0.01,
    "lora_rank": 4,
    "max_tokens": 64,
    "budget": {"max_active_attempts": 1, "cpus": 2, "memory_mb": 4096, "storage_mb": 8192},
}
UNTIL_ASSESSED = [dg.AssetKey(name) for name in ("policy", "trials", "assessments")]


def run_assets(key: str, assets: list[dg.AssetKey]) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.get()
    if not instance.has_dynamic_partition("batches", key):
        instance.add_dynamic_partitions("batches", [key])
    return (
        definitions(Settings())
        .resolve_job_def("training_batch")
        .execute_in_process(
            partition_key=key, instance=instance, raise_on_error=False, asset_selection=assets
        )
    )


def flip_one_byte(chunk_key: str) -> None:
    path = open_object_store(Settings().objects_url).root / chunk_key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_tampered_evidence_fails_the_integrity_check_and_excludes_its_group(
    state, tmp_path, monkeypatch
):
    with platform(monkeypatch) as (model_url, _proxy):
        run = accept_training(training_dataset(tmp_path), PLAN)
        key = batch_key(run.run_id, 0)
        script_one_right_one_wrong(model_url)
        sampled = run_assets(key, UNTIL_ASSESSED)
        assert sampled.success, [e.message for e in sampled.all_events if e.is_failure]
        config = Settings()
        flush_evidence(config.proxy_url, config.signing_key_path, config.owner, run.run_id)
        with control_engine(Settings()).connect() as conn:
            chunks = conn.execute(
                select(evidence_chunks).where(evidence_chunks.c.batch == key)
            ).all()
        assert chunks, "the batch published no evidence"
        tampered = chunks[0]
        flip_one_byte(tampered.chunk_key)
        qualified = run_assets(key, [dg.AssetKey("qualified_groups")])

    (check,) = qualified.get_asset_check_evaluations()
    assert check.check_name == "evidence_integrity"
    assert not check.passed
    failures = check.metadata["integrity_failures"].value
    assert tampered.chunk_key in failures[tampered.attempt_id]
    assert "does not match its recorded sha256" in failures[tampered.attempt_id]

    standings = QualifiedAttempt.from_table(qualified.asset_value(dg.AssetKey("qualified_groups")))
    (victim,) = [s for s in standings if s.attempt_id == tampered.attempt_id]
    assert not victim.qualified
    assert victim.exclusion.startswith(f"evidence unusable: evidence chunk {tampered.chunk_key}")
    assert "does not match its recorded sha256" in victim.exclusion
    affected = [s for s in standings if s.group_index == victim.group_index]
    assert all(not s.group_qualified for s in affected)
    assert "fewer than" in affected[0].group_exclusion
    untouched = [s for s in standings if s.group_index != victim.group_index]
    assert untouched and all(s.qualified and s.group_qualified for s in untouched)
