"""`synth run show`'s per-batch learning table: the numbers a researcher reads first."""

from __future__ import annotations

from rich import box
from rich.table import Table
from sqlalchemy import Engine

from synth_pipelines.control.policy_updates import PolicyUpdate, run_updates

_STEP_FIELDS = (
    "learning_rate",
    "loss",
    "grad_norm",
    "entropy",
    "kl_sample_train_v1",
    "kl_sample_train_v2",
    "sampling_sec",
    "forward_backward_sec",
    "optim_step_sec",
)

# Recorded since batches count how their attempts packed; None in older batches' rows.
_PACKING_FIELDS = (
    "calls_per_attempt_mean",
    "calls_per_attempt_max",
    "datums_per_attempt_mean",
    "datums_per_attempt_max",
    "new_datum_reasons",
)


def _row(update: PolicyUpdate) -> dict:
    metrics = update.metrics
    stepped = bool(metrics.get("optimizer_step"))
    return {
        "batch": update.batch,
        "batch_index": update.batch_index,
        "status": update.status,
        "sampler": metrics.get("sampler", ""),
        "attempts": metrics.get("attempts", 0),
        "assessed": metrics.get("assessed", 0),
        "reward_mean": metrics.get("reward_mean", 0.0),
        "reward_std": metrics.get("reward_std", 0.0),
        "groups": metrics.get("groups", 0),
        "groups_used": metrics.get("groups_used", 0),
        "groups_dropped": metrics.get("groups_dropped", {}),
        "attempts_excluded": metrics.get("attempts_excluded", {}),
        "frac_mixed": metrics.get("frac_mixed", 0.0),
        "frac_all_good": metrics.get("frac_all_good", 0.0),
        "frac_all_bad": metrics.get("frac_all_bad", 0.0),
        "datums": update.datums,
        "action_tokens_per_turn": metrics.get("action_tokens_per_turn", 0.0),
        "observation_tokens_per_turn": metrics.get("observation_tokens_per_turn", 0.0),
        "turns_per_attempt": metrics.get("turns_per_attempt", 0.0),
        "optimizer_step": stepped,
        "no_step_reason": None if stepped else metrics.get("no_step_reason") or update.resolution,
        **{name: metrics.get(name) for name in _STEP_FIELDS},
        **{name: metrics.get(name) for name in _PACKING_FIELDS},
    }


def learning_rows(engine: Engine, run_id: str) -> list[dict]:
    """One row per batch whose update is recorded, in batch order."""
    return [_row(update) for update in run_updates(engine, run_id)]


def learning_warnings(rows: list[dict]) -> list[str]:
    return [
        f"batch {row['batch_index']} applied no optimizer step: {row['no_step_reason']}"
        for row in rows
        if row["status"] == "acknowledged" and not row["optimizer_step"]
    ]


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _per_attempt(mean: float | None, most: int | None) -> str:
    return "-" if mean is None or most is None else f"{mean:.1f} (max {most})"


def _reasons(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "-"
    return "\n".join(f"{count} {reason}" for reason, count in counts.items()) or "none"


def _table(title: str, *columns: str) -> Table:
    return Table(*columns, title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))


def learning_tables(rows: list[dict]) -> list[Table]:
    """Three narrow tables (what sampling gave learning; how its attempts packed into
    datums; what the step did), so that each reads whole in an 80-column terminal.
    mixed/good/bad: shares of groups; used: groups that qualified; ac tok: sampled (action)
    tokens per turn; new datum because: why each datum after an attempt's first one started
    (`learning/packing_stats.py`); gnorm: gradient norm; ent: mean sampled-token entropy;
    f/b: forward_backward; opt: the optimizer step. A run without training batches (an
    evaluation) has no tables."""
    if not rows:
        return []
    signal = _table(
        "learning per batch: signal",
        "batch",
        "reward",
        "std",
        "mixed",
        "good",
        "bad",
        "used",
        "datums",
        "ac tok",
        "step",
    )
    packing = _table(
        "learning per batch: packing",
        "batch",
        "calls/attempt",
        "datums/attempt",
        "new datum because",
    )
    update = _table(
        "learning per batch: update",
        "batch",
        "lr",
        "loss",
        "gnorm",
        "ent",
        "kl v1",
        "kl v2",
        "samp s",
        "f/b s",
        "opt s",
    )
    for row in rows:
        step = "yes" if row["optimizer_step"] else "NO"
        if row["status"] != "acknowledged":
            step = "pending"
        signal.add_row(
            str(row["batch_index"]),
            f"{row['reward_mean']:.3f}",
            f"{row['reward_std']:.3f}",
            f"{row['frac_mixed']:.2f}",
            f"{row['frac_all_good']:.2f}",
            f"{row['frac_all_bad']:.2f}",
            f"{row['groups_used']}/{row['groups']}",
            str(row["datums"]),
            f"{row['action_tokens_per_turn']:.0f}",
            step,
        )
        packing.add_row(
            str(row["batch_index"]),
            _per_attempt(row["calls_per_attempt_mean"], row["calls_per_attempt_max"]),
            _per_attempt(row["datums_per_attempt_mean"], row["datums_per_attempt_max"]),
            _reasons(row["new_datum_reasons"]),
        )
        update.add_row(
            str(row["batch_index"]),
            _number(row["learning_rate"], ".0e"),
            _number(row["loss"], ".3g"),
            _number(row["grad_norm"], ".3g"),
            _number(row["entropy"], ".3f"),
            _number(row["kl_sample_train_v1"], ".1e"),
            _number(row["kl_sample_train_v2"], ".1e"),
            _number(row["sampling_sec"], ".0f"),
            _number(row["forward_backward_sec"], ".1f"),
            _number(row["optim_step_sec"], ".1f"),
        )
    return [signal, packing, update]
