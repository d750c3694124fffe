"""Tables of the learning path: the policy bound to a batch, qualified attempts, datums."""

from __future__ import annotations

from enum import StrEnum

from synth_pipelines.contracts.table import TableRow


class PolicyBinding(TableRow):
    """`policy[batch]`: the sampler every attempt of the batch samples through, and the
    trainer state the batch's update starts from."""

    run_id: str
    batch: str
    index: int
    sampler: str
    base_model: str
    trainer_state: str | None
    optimizer_state: bool
    source: str


class QualifiedAttempt(TableRow):
    """One attempt's standing for learning: qualified with an advantage, or excluded with
    the reason. Exclusions are settled before advantages, so an excluded attempt never
    changes its siblings' advantages."""

    run_id: str
    batch: str
    attempt_id: str
    trial_id: str
    group_index: int
    task_name: str
    reward: float | None
    calls: int
    qualified: bool
    exclusion: str | None
    group_qualified: bool
    group_exclusion: str | None
    advantage: float | None


class DatumRow(TableRow):
    """One packed learning input, exactly as `trajectory_to_data` built it."""

    run_id: str
    batch: str
    attempt_id: str
    group_index: int
    agent_id: str
    datum_index: int
    advantage: float
    model_input: list[int]
    target_tokens: list[int]
    logprobs: list[float]
    advantages: list[float]
    mask: list[float]

    @property
    def key(self) -> tuple[str, str, int]:
        """Which datum this is, whatever order it was packed in."""
        return (self.attempt_id, self.agent_id, self.datum_index)


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


def same_datums(first: list[DatumRow], second: list[DatumRow]) -> bool:
    """Whether two packings of a batch hold the same datums, in whatever order."""
    return sorted(first, key=lambda row: row.key) == sorted(second, key=lambda row: row.key)
