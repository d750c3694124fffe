"""Tables of the learning path: the policy bound to a batch, qualified attempts, datums."""

from __future__ import annotations

from synth_pipelines.contracts.exclusion import ExclusionReason

# Named here too, where the learning tables' readers have always imported it from.
from synth_pipelines.contracts.new_datum_reasons import NewDatumReason as NewDatumReason
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
    the reason (its kind, and the whole account as text). Exclusions are settled before
    advantages, so an excluded attempt never changes its siblings' advantages."""

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
    exclusion_reason: ExclusionReason | None
    group_exclusion_reason: ExclusionReason | None

    added_columns = ("exclusion_reason", "group_exclusion_reason")


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


def same_datums(first: list[DatumRow], second: list[DatumRow]) -> bool:
    """Whether two packings of a batch hold the same datums, in whatever order."""
    return sorted(first, key=lambda row: row.key) == sorted(second, key=lambda row: row.key)
