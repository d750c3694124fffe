"""`synth run show`'s per-batch learning tables and `synth run metrics`' per-batch series:
the numbers a researcher reads first."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from synth_pipelines.contracts.new_datum_reasons import NewDatumReason
from synth_pipelines.contracts.policy_update import BatchLearningRow


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
