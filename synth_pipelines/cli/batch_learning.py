"""`synth run show`'s per-batch learning tables and `synth run metrics`' per-batch series:
the numbers a researcher reads first."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.table import Table
from sqlalchemy import Engine

from synth_pipelines.contracts.new_datum_reasons import NewDatumReason
from synth_pipelines.contracts.policy_update import BatchLearningRow
from synth_pipelines.contracts.run_spec import parse_batch_key
from synth_pipelines.control.events import read_events
from synth_pipelines.control.policy_updates import run_updates


def learning_rows(engine: Engine, run_id: str) -> list[BatchLearningRow]:
    """One row per batch whose update is recorded, in batch order."""
    return [BatchLearningRow.of(update) for update in run_updates(engine, run_id)]


def learning_warnings(rows: list[BatchLearningRow]) -> list[str]:
    return [
        f"batch {row.batch_index} applied no optimizer step: {row.no_step_reason}"
        for row in rows
        if row.status == "acknowledged" and not row.optimizer_step
    ]


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _per_attempt(mean: float | None, most: int | None) -> str:
    return "-" if mean is None or most is None else f"{mean:.1f} (max {most})"


def _reasons(counts: dict[NewDatumReason, int] | None) -> str:
    if counts is None:
        return "-"
    return "\n".join(f"{count} {reason}" for reason, count in counts.items()) or "none"


def _table(title: str, *columns: str) -> Table:
    return Table(*columns, title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))


def learning_tables(rows: list[BatchLearningRow]) -> list[Table]:
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
        step = "yes" if row.optimizer_step else "NO"
        if row.status != "acknowledged":
            step = "pending"
        signal.add_row(
            str(row.batch_index),
            f"{row.reward_mean:.3f}",
            f"{row.reward_std:.3f}",
            f"{row.frac_mixed:.2f}",
            f"{row.frac_all_good:.2f}",
            f"{row.frac_all_bad:.2f}",
            f"{row.groups_used}/{row.groups}",
            str(row.datums),
            f"{row.action_tokens_per_turn:.0f}",
            step,
        )
        packing.add_row(
            str(row.batch_index),
            _per_attempt(row.calls_per_attempt_mean, row.calls_per_attempt_max),
            _per_attempt(row.datums_per_attempt_mean, row.datums_per_attempt_max),
            _reasons(row.new_datum_reasons),
        )
        update.add_row(
            str(row.batch_index),
            _number(row.learning_rate, ".0e"),
            _number(row.loss, ".3g"),
            _number(row.grad_norm, ".3g"),
            _number(row.entropy, ".3f"),
            _number(row.kl_sample_train_v1, ".1e"),
            _number(row.kl_sample_train_v2, ".1e"),
            _number(row.sampling_sec, ".0f"),
            _number(row.forward_backward_sec, ".1f"),
            _number(row.optim_step_sec, ".1f"),
        )
    return [signal, packing, update]


def event_reward(rewards_json: str | None) -> float | None:
    """The headline reward of an `attempt.finished` event (as `judging/assessing.py` reads it)."""
    rewards = json.loads(rewards_json) if rewards_json else {}
    if "reward" in rewards:
        return float(rewards["reward"])
    return float(next(iter(rewards.values()))) if len(rewards) == 1 else None


def _sampled_tokens(row: BatchLearningRow) -> int:
    return round(row.action_tokens_per_turn * row.turns_per_attempt * row.attempts)


def batch_series(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """One `run metrics` row per batch that finished an attempt or recorded an update, in
    batch order. A recorded update is the batch's account of itself (its attempts and
    reward mean); otherwise the batch's finished attempts are counted, and the learning
    fields are None."""
    from synth_pipelines.contracts.assessment import passed

    finished = read_events(engine, run_id=run_id, kinds=("attempt.finished",), limit=10_000_000)
    rewards: dict[str, list[float | None]] = {}
    for event in finished:
        rewards.setdefault(event.data["batch"], []).append(event_reward(event.data.get("rewards")))
    learned = {row.batch: row for row in learning_rows(engine, run_id)}
    series = []
    for batch in sorted(rewards.keys() | learned.keys(), key=lambda key: parse_batch_key(key)[1]):
        scored = [r for r in rewards.get(batch, []) if r is not None]
        row = {
            "batch_index": parse_batch_key(batch)[1],
            "batch": batch,
            "attempts": len(rewards.get(batch, [])),
            "passed": sum(passed(r) for r in scored),
            "reward_mean": sum(scored) / len(scored) if scored else None,
            "sampler": None,
            "groups_used": None,
            "groups_dropped": None,
            "datums": None,
            "tokens": None,
            "step_applied": None,
            "kl_sample_train_v1": None,
        }
        update = learned.get(batch)
        if update is not None:
            row |= {
                "attempts": update.attempts,
                "reward_mean": update.reward_mean,
                "sampler": update.sampler,
                "groups_used": update.groups_used,
                "groups_dropped": sum(update.groups_dropped.values()),
                "datums": update.datums,
                "tokens": _sampled_tokens(update),
                "step_applied": update.optimizer_step if update.status == "acknowledged" else None,
                "kl_sample_train_v1": update.kl_sample_train_v1,
            }
        series.append(row)
    return series


SERIES_FIELDS = (
    "batch_index",
    "batch",
    "attempts",
    "passed",
    "reward_mean",
    "sampler",
    "groups_used",
    "groups_dropped",
    "datums",
    "tokens",
    "step_applied",
    "kl_sample_train_v1",
)
"""The columns of `run metrics --csv`, in order: the fields of one `batch_series` row."""

_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None]) -> str:
    """One character per value, from ▁ (the lowest) to █ (the highest); a space where a
    batch has no value; all ▄ when every value is the same."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    top = len(_BLOCKS) - 1

    def block(value: float | None) -> str:
        if value is None:
            return " "
        if high == low:
            return _BLOCKS[top // 2]
        return _BLOCKS[round((value - low) / (high - low) * top)]

    return "".join(block(v) for v in values)


def reward_trend(series: list[dict[str, Any]]) -> str | None:
    """`reward per batch ▁▃▅█ (min 0.125, max 0.875)`, or None without any reward."""
    rewards = [row["reward_mean"] for row in series]
    known = [r for r in rewards if r is not None]
    if not known:
        return None
    return f"reward per batch {sparkline(rewards)} (min {min(known):.3f}, max {max(known):.3f})"


def _cell(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, spec)


def series_table(series: list[dict[str, Any]]) -> Table:
    """The per-batch table of `run show` (of a train run) and `run metrics`: narrow columns,
    and the sampler's id folded over lines rather than cut, so it reads whole in 80
    columns. used/drop: groups that qualified or were dropped; step: whether the batch's
    optimizer step was applied; kl: `kl_sample_train_v1`."""
    table = _table(
        "per batch",
        "batch",
        "sampler",
        "att",
        "reward",
        "used",
        "drop",
        "datums",
        "tokens",
        "step",
        "kl",
    )
    table.columns[1].overflow = "fold"
    table.columns[1].ratio = 1
    for row in series:
        table.add_row(
            str(row["batch_index"]),
            _cell(row["sampler"]),
            str(row["attempts"]),
            _cell(row["reward_mean"], ".3f"),
            _cell(row["groups_used"]),
            _cell(row["groups_dropped"]),
            _cell(row["datums"]),
            _cell(row["tokens"]),
            _cell(row["step_applied"]),
            _cell(row["kl_sample_train_v1"], ".1e"),
        )
    return table
