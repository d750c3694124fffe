"""Why a batch stopped: the innermost error of a failure, with the attempt it came from.

Dagster reports a failed step as a chain of errors (the step's own wrapper outermost,
the exception that started it innermost); an operator needs the innermost one, and the
task and attempt when an attempt raised it (`AttemptFailedError` wraps those).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol


class AttemptFailedError(RuntimeError):
    """An error that escaped one attempt, carried up with the attempt's identity."""

    def __init__(self, attempt_id: str, task_name: str, error: BaseException):
        super().__init__(
            f"attempt {attempt_id} of task {task_name}: {type(error).__name__}: {error}"
        )
        self.attempt_id = attempt_id
        self.task_name = task_name


class ErrorInfo(Protocol):
    """Dagster's serializable error: class name, message, and what caused it."""

    @property
    def cls_name(self) -> str | None: ...
    @property
    def message(self) -> str: ...
    @property
    def cause(self) -> ErrorInfo | None: ...
    @property
    def context(self) -> ErrorInfo | None: ...


@dataclass(frozen=True)
class FailureCause:
    error_type: str
    message: str
    attempt: str | None
    """The failing attempt's `AttemptFailedError` line, when an attempt raised it."""

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)

    def describe(self) -> str:
        where = f" ({self.attempt})" if self.attempt else ""
        return f"{self.error_type}: {self.message}{where}"


def innermost_cause(error: ErrorInfo) -> FailureCause:
    chain = [error]
    while (following := chain[-1].cause or chain[-1].context) is not None:
        chain.append(following)
    attempt = next(
        (link.message.strip() for link in chain if link.cls_name == AttemptFailedError.__name__),
        None,
    )
    innermost = chain[-1]
    message = innermost.message.strip()
    prefix = f"{innermost.cls_name}: "
    return FailureCause(
        error_type=innermost.cls_name or "Error",
        message=message.removeprefix(prefix)[:2000],
        attempt=attempt[:500] if attempt else None,
    )
