"""Live progress of a long command: a run's (or a regrade's) counts as the gateway reports
them, or a dataset's tasks as they are published, shown as a bar on stderr, or with
`--json` as JSON lines on stderr so that stdout keeps only the command's documented document.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from synth_pipelines.registry.datasets import PublishPhase

ProgressMode = Literal["bar", "json", "off"]

WAIT_HELP = (
    "Follow the run until it finishes: a progress bar on stderr, or with --json one "
    "`run progress` JSON object per line on stderr per change (`synth schema 'run "
    "progress'`), stdout keeping only the document. Ctrl-C stops the waiting, not the run "
    "(exit 130); `synth run wait RUN_ID` waits again."
)


class Shown(Protocol):
    """Something a `ProgressDisplay` shows: a JSON line of a documented shape, or a bar."""

    document: ClassVar[str]

    def as_dict(self) -> dict[str, Any]: ...

    def bar(self) -> tuple[str, int, int]:
        """The bar's description, and how far it is filled: done, total."""
        ...


@dataclass
class RunProgress:
    """What a run has done so far; the fields of the `run progress` JSON lines."""

    document: ClassVar[str] = "run progress"
    run_id: str
    kind: str
    status: str
    batches_done: int
    batches_total: int
    attempts_done: int = 0
    attempts_total: int = 0
    passed: int = 0
    reward_mean: float | None = None
    """The last batch whose update is recorded: its attempts' mean reward."""
    step_applied: bool | None = None
    """Whether that batch's optimizer step was applied (None before any update)."""
    steps_done: int | None = None
    steps_total: int | None = None
    """A warm start's supervised steps (None for other runs)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def bar(self) -> tuple[str, int, int]:
        unit, done, total = _measure(self)
        return f"{_description(self)} · {unit}", done, total


@dataclass
class PublishProgress:
    """A dataset's task just packed or uploaded; the fields of `dataset publish progress`."""

    document: ClassVar[str] = "dataset publish progress"

    dataset: str
    phase: PublishPhase
    task: str
    done: int
    total: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def bar(self) -> tuple[str, int, int]:
        return f"{self.dataset} · tasks {self.phase}", self.done, self.total


def _description(counts: RunProgress) -> str:
    parts = [counts.run_id, f"batches {counts.batches_done}/{counts.batches_total}"]
    if counts.attempts_total:
        parts.append(f"passed {counts.passed}")
    if counts.reward_mean is not None:
        step = "applied" if counts.step_applied else "NOT applied"
        parts.append(f"last reward {counts.reward_mean:.3f}, step {step}")
    return " · ".join(parts)


class ProgressDisplay:
    """One job: show successive counts. `bar`: a rich bar on `console` (stderr): for a run,
    over the warm start's steps for a warm start, otherwise over attempts (or batches where
    no attempt is counted); for a publish, over its tasks; `json`: one JSON line of the
    counts' document on stderr per change; `off`: nothing."""

    def __init__(self, mode: ProgressMode, console: Console) -> None:
        self.mode = mode
        self._last: dict[str, Any] | None = None
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=mode != "bar",
            transient=True,
        )
        self._task = self._bar.add_task("", total=None)

    def __enter__(self) -> ProgressDisplay:
        self._bar.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._bar.__exit__(kind, error, traceback)

    def show(self, counts: Shown) -> None:
        from synth_pipelines.contracts.documents import validated

        document = validated(counts.document, counts.as_dict())
        if document == self._last:
            return
        self._last = document
        if self.mode == "json":
            sys.stderr.write(json.dumps(document, sort_keys=True) + "\n")
            sys.stderr.flush()
        elif self.mode == "bar":
            description, done, total = counts.bar()
            self._bar.update(self._task, description=description, completed=done, total=total)


def _measure(counts: RunProgress) -> tuple[str, int, int]:
    """What the bar fills with: a warm start's steps, else attempts (a regrade's
    assessments), else batches."""
    if counts.steps_total is not None:
        return "steps", counts.steps_done or 0, counts.steps_total
    if counts.attempts_total:
        unit = "assessments" if counts.kind == "regrade" else "attempts"
        return unit, counts.attempts_done, counts.attempts_total
    return "batches", counts.batches_done, counts.batches_total
