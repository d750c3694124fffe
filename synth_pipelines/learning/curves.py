"""Reward curves as PNG images, for Dagster metadata and reports."""

from __future__ import annotations

import io
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def reward_curve_png(
    rewards: Sequence[float], title: str, *, reference: float | None = None, label: str = "batch"
) -> bytes:
    figure = Figure(figsize=(6, 3.2), dpi=100)
    axes = figure.subplots()
    axes.plot(range(len(rewards)), rewards, marker="o", color="#2563eb", label="mean reward")
    if reference is not None:
        axes.axhline(reference, color="#9ca3af", linestyle="--", label="baseline")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(label)
    axes.set_ylabel("mean reward")
    axes.set_ylim(-0.05, 1.05)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
