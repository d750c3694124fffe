"""One captured model call: exactly what the model saw and sampled, and who called.

Prompt tokens, sampled tokens and sampler logprobs come from the same prepared prompt
and sampled output the response was built from; they are never re-tokenized.
"""

from __future__ import annotations

from datetime import datetime

from synth_pipelines.contracts.call_identity import CallIdentity
from synth_pipelines.contracts.table import TableRow


class Interaction(TableRow, CallIdentity):
    """A flat row: the caller's identity comes first, then the call's own columns."""

    call_index: int
    model: str
    sampler: str
    temperature: float
    """What the tokens were sampled at; their logprobs are the model's own (temperature 1)."""
    prompt_tokens: list[int]
    completion_tokens: list[int]
    logprobs: list[float]
    sampler_stop_reason: str
    stop_reason: str
    parse_error: bool
    fitted: bool
    request_json: str
    effective_request_json: str | None
    response_json: str
    render_ms: float
    sample_ms: float
    parse_ms: float
    total_ms: float
    created_at: datetime

    @property
    def aligned(self) -> bool:
        """Every sampled token has exactly one sampler logprob."""
        return len(self.completion_tokens) == len(self.logprobs) > 0
