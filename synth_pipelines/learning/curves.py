"""Learning curves as PNG images, for Dagster metadata and reports."""

from __future__ import annotations

import io
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def _curve_png(
    values: Sequence[float],
    title: str,
    *,
    ylabel: str,
    xlabel: str,
    bounded: bool,
    reference: float | None = None,
) -> bytes:
    figure = Figure(figsize=(6, 3.2), dpi=100)
    axes = figure.subplots()
    axes.plot(range(len(values)), values, marker="o", color="#2563eb", label=ylabel)
    if reference is not None:
        axes.axhline(reference, color="#9ca3af", linestyle="--", label="baseline")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if bounded:
        axes.set_ylim(-0.05, 1.05)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="best")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def reward_curve_png(
    rewards: Sequence[float], title: str, *, reference: float | None = None, label: str = "batch"
) -> bytes:
    return _curve_png(
        rewards, title, ylabel="mean reward", xlabel=label, bounded=True, reference=reference
    )


def loss_curve_png(losses: Sequence[float], title: str) -> bytes:
    return _curve_png(losses, title, ylabel="loss per token", xlabel="step", bounded=False)


def kl_curve_png(kls: Sequence[float], title: str) -> bytes:
    return _curve_png(kls, title, ylabel="KL sample/train (v1)", xlabel="batch", bounded=False)
