"""Why an attempt or a sampling group cannot teach the model: a kind to count by, and the
particulars for the people who read them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ExclusionReason(StrEnum):
    """The kinds a batch counts its excluded attempts (`attempts_excluded`) and dropped
    groups (`groups_dropped`) by."""

    NO_VALID_REWARD = "no valid reward"
    REWARD_NOT_FINITE = "reward not finite"
    EVIDENCE_UNUSABLE = "evidence unusable"
    NO_CALLS = "no captured model calls"
    TEXT_EVIDENCE = "text evidence"
    """A call answered by an inference-only route: no token ids or logprobs."""
    UNALIGNED_LOGPROBS = "unaligned logprobs"
    LOGPROB_NOT_FINITE = "logprob not finite"
    EMPTY_PROMPT = "empty prompt"
    OTHER_POLICY = "sampled by another policy"
    TOO_FEW_QUALIFIED = "too few qualified attempts"
    """A group: fewer qualified attempts than the plan requires."""
    CONSTANT_REWARD = "constant reward"
    """A group: every qualified attempt scored the same, so none has an advantage."""


@dataclass(frozen=True)
class Exclusion:
    reason: ExclusionReason
    detail: str
    """The whole account, as `qualified_groups` and `synth checkpoint show` print it."""
