"""The control database: authoritative relationships and lifecycle facts.

Large payloads (task packages, trial records, evidence, tables) live in the object
store; these tables hold what points at them and what happened, in order.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from synth_pipelines.contracts.operator_key import LOCAL_ORG

metadata = MetaData()

dataset_versions = Table(
    "dataset_versions",
    metadata,
    Column("name", String(200), nullable=False),
    Column("version", String(100), nullable=False),
    Column("digest", String(80), nullable=False),
    Column("task_count", Integer, nullable=False),
    Column("owner", String(100), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("name", "version"),
)

dataset_tasks = Table(
    "dataset_tasks",
    metadata,
    Column("dataset_name", String(200), nullable=False),
    Column("dataset_version", String(100), nullable=False),
    Column("position", Integer, nullable=False),
    Column("task_name", String(200), nullable=False),
    Column("digest", String(80), nullable=False),
    Column("package_key", String(300), nullable=False),
    Column("package_sha256", String(64), nullable=False),
    PrimaryKeyConstraint("dataset_name", "dataset_version", "position"),
)

profile_versions = Table(
    "profile_versions",
    metadata,
    Column("name", String(200), nullable=False),
    Column("version", String(100), nullable=False),
    Column("digest", String(80), nullable=False),
    Column("canonical", Text, nullable=False),
    Column("owner", String(100), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("name", "version"),
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(40), primary_key=True),
    Column("owner", String(100), nullable=False),
    # Runs from before organizations were recorded were all the local operator's.
    Column("org", String(64), nullable=False, server_default=LOCAL_ORG),
    Column("idempotency_key", String(200), nullable=False),
    Column("request_digest", String(80), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("batch_count", Integer, nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # Set once the batch gate admits the run under its organization's run limit.
    Column("admitted_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("owner", "idempotency_key", name="uq_runs_owner_idempotency_key"),
)

run_events = Table(
    "run_events",
    metadata,
    Column(
        "seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("run_id", String(40), nullable=False),
    Column("kind", String(60), nullable=False),
    Column("data_json", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_run_events_run_seq", "run_id", "seq"),
)

asset_outputs = Table(
    "asset_outputs",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("asset", String(100), nullable=False),
    Column("partition", String(200), nullable=False),
    Column("object_key", String(400), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_asset_outputs_asset_partition", "asset", "partition", "id"),
)

evidence_chunks = Table(
    "evidence_chunks",
    metadata,
    Column("chunk_key", String(400), primary_key=True),
    Column("run_id", String(40), nullable=False),
    Column("batch", String(80), nullable=True),
    Column("attempt_id", String(120), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("calls", Integer, nullable=False),
    Column("published_at", DateTime(timezone=True), nullable=False),
    Index("ix_evidence_chunks_batch", "batch"),
    Index("ix_evidence_chunks_attempt", "attempt_id"),
)

evidence_calls = Table(
    "evidence_calls",
    metadata,
    Column("call_id", String(64), primary_key=True),
    Column("chunk_key", String(400), nullable=False),
    Column("run_id", String(40), nullable=False),
    Column("batch", String(80), nullable=True),
    Column("attempt_id", String(120), nullable=False),
    Column("agent_id", String(120), nullable=False),
    Column("call_index", Integer, nullable=False),
    Column("role", String(20), nullable=False),
    Index("ix_evidence_calls_attempt", "attempt_id"),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("sampler_path", String(400), primary_key=True),
    Column("run_id", String(40), nullable=False),
    Column("batch", String(80), nullable=False),
    Column("batch_index", Integer, nullable=False),
    Column("state_path", String(400), nullable=False),
    Column("base_model", String(200), nullable=False),
    Column("owner", String(100), nullable=False),
    Column("dataset_cursor", Integer, nullable=False),
    Column("optimizer_steps", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_checkpoints_run", "run_id", "batch_index"),
)

policy_updates = Table(
    "policy_updates",
    metadata,
    Column("run_id", String(40), nullable=False),
    Column("batch", String(80), nullable=False),
    Column("batch_index", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("datums", Integer, nullable=False),
    Column("state_path", String(400), nullable=True),
    Column("metrics_json", Text, nullable=False),
    Column("marked_at", DateTime(timezone=True), nullable=False),
    Column("resolved_at", DateTime(timezone=True), nullable=True),
    Column("resolution", Text, nullable=True),
    PrimaryKeyConstraint("run_id", "batch"),
)

model_call_faults = Table(
    "model_call_faults",
    metadata,
    Column("run_id", String(40), nullable=False),
    Column("attempt_id", String(120), nullable=False),
    Column("role", String(20), nullable=False),
    Column("faults", Integer, nullable=False),
    Column("status", Integer, nullable=False),
    Column("error_type", String(60), nullable=False),
    Column("message", Text, nullable=False),
    Column("first_at", DateTime(timezone=True), nullable=False),
    Column("last_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "attempt_id", "role"),
)

regrades = Table(
    "regrades",
    metadata,
    Column("regrade_id", String(40), primary_key=True),
    Column("run_id", String(40), nullable=False),
    Column("assessor", String(300), nullable=False),
    Column("assessor_digest", String(80), nullable=True),
    Column("backfill_id", String(80), nullable=True),
    Column("batches", Integer, nullable=False),
    Column("evaluation_only", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_regrades_run", "run_id"),
)

batch_results = Table(
    "batch_results",
    metadata,
    # One row per batch, replaced whenever its trials or assessments are stored again.
    Column("run_id", String(40), nullable=False),
    Column("batch_index", Integer, nullable=False),
    Column("results_json", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "batch_index"),
)

run_documents = Table(
    "run_documents",
    metadata,
    # The last `synth run show --json` of a run and the fingerprint of its inputs: a
    # cache, replaced on every full read; never a source of truth.
    Column("run_id", String(40), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("document", Text, nullable=False),
    Column("stored_at", DateTime(timezone=True), nullable=False),
)

token_revocations = Table(
    "token_revocations",
    metadata,
    # Increasing, so that a proxy reads only the revocations it has not seen yet.
    Column("sequence", Integer, primary_key=True, autoincrement=True),
    Column("token_id", String(64), nullable=False, unique=True),
    Column("run_id", String(40), nullable=False),
    Column("attempt_id", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=False),
)

admission_leases = Table(
    "admission_leases",
    metadata,
    # One row per attempt asking its worker pool for room: waiting, then held until the
    # attempt ends. A row whose holder stopped renewing it expires and is reclaimed.
    Column("lease_id", String(40), primary_key=True),
    Column("pool", String(200), nullable=False),
    Column("holder", String(200), nullable=False),
    Column("run_id", String(40), nullable=True),
    Column("attempt_id", String(200), nullable=True),
    Column("org", String(64), nullable=True),
    Column("cpus", Float, nullable=False),
    Column("memory_mb", Integer, nullable=False),
    Column("storage_mb", Integer, nullable=False),
    Column("state", String(10), nullable=False),
    Column("requested_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("ix_admission_leases_pool", "pool", "requested_at"),
)

operator_keys = Table(
    "operator_keys",
    metadata,
    # The gateway's API keys: the secret's HMAC under the gateway's own secret, never the
    # secret itself, so a copy of this table cannot be used to act as anyone.
    Column("key_id", String(32), primary_key=True),
    Column("secret_digest", String(64), nullable=False),
    Column("owner", String(64), nullable=False),
    Column("org", String(64), nullable=False),
    Column("role", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

interactive_tokens = Table(
    "interactive_tokens",
    metadata,
    # The tokens the gateway minted for operators' own harness sessions: whose they are
    # (so only their owner revokes one) and the key that asked (revoked with it).
    Column("token_id", String(64), primary_key=True),
    Column("key_id", String(32), nullable=False),
    Column("owner", String(64), nullable=False),
    Column("attempt_id", String(200), nullable=False),
    Column("model", Text, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_interactive_tokens_key", "key_id"),
)

org_limits = Table(
    "org_limits",
    metadata,
    # Set by an admin; an organization without a row, or a limit left NULL, is unlimited.
    Column("org", String(64), primary_key=True),
    Column("max_concurrent_runs", Integer, nullable=True),
    Column("max_active_attempts", Integer, nullable=True),
    Column("updated_by", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

ui_sessions = Table(
    "ui_sessions",
    metadata,
    # Sign-ins to the Dagster UI through the gateway (`control/ui_sessions.py`): a one-time
    # login link, then the browser's session cookie, each kept only as its SHA-256, and
    # the API key it acts as (checked again on every request).
    Column("login_digest", String(64), primary_key=True),
    Column("key_id", String(32), nullable=False),
    Column("login_expires_at", Float, nullable=False),
    Column("cookie_digest", String(64), nullable=True, unique=True),
    Column("expires_at", Float, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

worker_attempts = Table(
    "worker_attempts",
    metadata,
    # One row per claim of a batch (`control/worker_attempts.py`): the batch's current
    # attempt is its highest attempt_number, and only an active current attempt writes.
    Column("worker_attempt_id", String(240), primary_key=True),
    Column("run_id", String(40), nullable=False),
    Column("batch", String(200), nullable=False),
    Column("batch_index", Integer, nullable=False),
    Column("attempt_number", Integer, nullable=False),
    Column("worker", String(200), nullable=False),
    Column("advertised_json", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=False),
    Column("lease_expires_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    Column("end_reason", Text, nullable=True),
    UniqueConstraint("batch", "attempt_number", name="uq_worker_attempts_batch_number"),
    Index("ix_worker_attempts_run", "run_id"),
)

worker_progress = Table(
    "worker_progress",
    metadata,
    # Which run event each progress append of a worker attempt became: a retried append
    # with the same local sequence number finds its event here and adds none.
    Column("worker_attempt_id", String(240), nullable=False),
    Column("local_seq", Integer, nullable=False),
    Column("event_seq", BigInteger, nullable=False),
    PrimaryKeyConstraint("worker_attempt_id", "local_seq"),
)

ADDED_COLUMNS = (runs.c.org, runs.c.admitted_at, admission_leases.c.org)
"""Columns added to tables after they first shipped: `create_tables` adds them to a
database made before, with their server default (or NULL) in the rows already there."""
