"""What a finished operation hands back to the client polling for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ErrorCategory = Literal["user", "server"]


@dataclass(frozen=True)
class JsonResult:
    body: dict[str, Any]


@dataclass(frozen=True)
class ProtoResult:
    body: bytes


@dataclass(frozen=True)
class Failure:
    message: str
    category: ErrorCategory

    def body(self) -> dict[str, str]:
        return {"error": self.message, "category": self.category}


Outcome = JsonResult | ProtoResult | Failure
