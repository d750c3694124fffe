"""Why the learning path starts a new datum inside an attempt.

Its own module, without the tables of `contracts/learning.py`, so that the CLI's JSON
documents can name it without importing Arrow.
"""

from __future__ import annotations

from enum import StrEnum


class NewDatumReason(StrEnum):
    """Why a datum after an attempt's first one started: the names a batch's
    `new_datum_reasons` counts (`learning/packing_stats.py`) and `synth run show` shows."""

    DELEGATED_AGENT = "delegated_agent"
    """A delegated agent's first call: the agent acts in its own context, its own
    trajectory."""
    PROMPT_REWROTE_HISTORY = "prompt_rewrote_history"
    """The prompt parts from the held tokens before the previous sampled completion: the
    harness or the proxy changed earlier context (compaction, context fitting)."""
    GENERATION_NOT_ECHOED = "generation_not_echoed"
    """The prompt keeps the held prompt but parts inside the previous sampled completion:
    the harness sent the assistant turn back in tokens other than the sampled ones."""
    PROMPT_SHORTER = "prompt_shorter"
    """The prompt agrees with the held tokens but ends before they do."""
