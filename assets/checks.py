"""Asset checks that make the UI the place to see whether evidence can be trusted.

`evidence_integrity` re-reads every published evidence chunk of the batch's attempts,
verifying its full-object SHA-256 and each call's token/logprob alignment; it blocks the
policy update when anything fails. `datum_alignment` checks every packed datum's arrays.
"""

import dagster as dg
import pyarrow as pa

from assets.learning import datums, qualified_groups
from assets.partitions import batches
from resources.control_database import ControlDatabase
from resources.object_store import ObjectStoreResource
from synth_pipelines.contracts.learning import DatumRow, QualifiedAttempt
from synth_pipelines.evidence.reader import read_attempt_evidence


@dg.asset_check(asset=qualified_groups, partitions_def=batches, blocking=True)
def evidence_integrity(
    context: dg.AssetCheckExecutionContext,
    qualified_groups: pa.Table,
    control: ControlDatabase,
    objects: ObjectStoreResource,
) -> dg.AssetCheckResult:
    attempts = [s.attempt_id for s in QualifiedAttempt.from_table(qualified_groups)]
    evidence = read_attempt_evidence(control.engine(), objects.store(), attempts)
    misaligned = [
        call.call_id for calls in evidence.calls.values() for call in calls if not call.aligned
    ]
    return dg.AssetCheckResult(
        passed=not evidence.problems and not misaligned,
        metadata={
            "chunks_verified": evidence.chunks,
            "bytes_verified": evidence.bytes,
            "calls": sum(len(calls) for calls in evidence.calls.values()),
            "integrity_failures": dg.MetadataValue.json(evidence.problems),
            "misaligned_calls": dg.MetadataValue.json(misaligned),
        },
        description=(
            "every evidence chunk matches its recorded SHA-256 and every sampled token has "
            "one sampler logprob"
        ),
    )


@dg.asset_check(asset=datums, partitions_def=batches, blocking=True)
def datum_alignment(datums: pa.Table) -> dg.AssetCheckResult:
    rows = DatumRow.from_table(datums)
    broken = [
        f"{row.attempt_id}/{row.agent_id}/{row.datum_index}"
        for row in rows
        if not (
            len(row.model_input)
            == len(row.target_tokens)
            == len(row.logprobs)
            == len(row.advantages)
            == len(row.mask)
        )
    ]
    return dg.AssetCheckResult(
        passed=not broken,
        metadata={"datums": len(rows), "misaligned": dg.MetadataValue.json(broken)},
    )
