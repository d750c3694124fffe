"""Per-batch packing numbers from captured calls: how many datums each attempt packed
into, and why each datum after an attempt's first one started, where the next prompt
parted from the tokens the datum held. Every count is checked against the datums
`trajectory_to_data` actually packs from the same calls."""

from collections import Counter

from synth_pipelines.contracts.exclusion import ExclusionReason
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.learning import NewDatumReason, QualifiedAttempt
from synth_pipelines.learning.datums import attempt_datums, group_datums
from synth_pipelines.learning.packing_stats import (
    AttemptPacking,
    attempt_packing,
    batch_packing,
    group_packing,
    new_datum_reason,
)
from tests.learning_records import call


def _standing(attempt: str, *, qualified: bool = True) -> QualifiedAttempt:
    return QualifiedAttempt(
        run_id="r-1",
        batch="r-1.b0000",
        attempt_id=attempt,
        trial_id=f"trial-{attempt}",
        group_index=0,
        task_name="t/task",
        reward=1.0 if qualified else None,
        calls=3,
        qualified=qualified,
        exclusion=None if qualified else "no assessment",
        group_qualified=True,
        group_exclusion=None,
        advantage=0.5 if qualified else None,
        exclusion_reason=None if qualified else ExclusionReason.NO_VALID_REWARD,
        group_exclusion_reason=None,
    )


def _packing(calls: list[Interaction]) -> AttemptPacking:
    standing = _standing(calls[0].attempt_id)
    packing = attempt_packing(standing, calls)
    assert packing.datums == len(attempt_datums(standing, calls))
    return packing


# The first call of every attempt below: prompt [1, 2, 3], sampled [10, 11]; the datum
# then holds [1, 2, 3, 10, 11].
FIRST = ([1, 2, 3], [10, 11], [-0.1, -0.2])


def test_calls_whose_prompts_extend_the_held_tokens_pack_into_one_datum():
    packing = _packing(
        [
            call("a0", 0, *FIRST),
            call("a0", 1, [1, 2, 3, 10, 11, 20, 21], [30], [-0.3]),
            call("a0", 2, [1, 2, 3, 10, 11, 20, 21, 30, 40], [50, 51], [-0.4, -0.5]),
        ]
    )
    assert packing == AttemptPacking(calls=3, datums=1, reasons=Counter())


def test_a_prompt_that_changes_earlier_context_rewrote_history():
    # Compaction: the instruction [2, 3] is replaced by a summary [7].
    packing = _packing([call("a0", 0, *FIRST), call("a0", 1, [1, 7, 10, 11, 20], [30], [-0.3])])
    assert packing.reasons == Counter({NewDatumReason.PROMPT_REWROTE_HISTORY: 1})


def test_a_prompt_that_resends_the_assistant_turn_differently_did_not_echo_the_generation():
    # The held prompt [1, 2, 3] is kept; the sampled [10, 11] comes back as [10, 12].
    packing = _packing([call("a0", 0, *FIRST), call("a0", 1, [1, 2, 3, 10, 12, 20], [30], [-0.3])])
    assert packing.reasons == Counter({NewDatumReason.GENERATION_NOT_ECHOED: 1})


def test_a_prompt_that_stops_inside_the_held_tokens_is_shorter():
    # A retry of the same request, and a prompt that ends inside the sampled completion.
    packing = _packing(
        [
            call("a0", 0, *FIRST),
            call("a0", 1, [1, 2, 3], [10, 11], [-0.1, -0.2]),
            call("a0", 2, [1, 2, 3, 10], [11], [-0.2]),
        ]
    )
    assert packing.reasons == Counter({NewDatumReason.PROMPT_SHORTER: 2})
    assert packing.datums == 3


def test_the_reason_is_where_the_prompt_parts_from_the_held_tokens():
    held, sampled = [1, 2, 3, 10, 11], 2
    assert new_datum_reason(held, sampled, [1, 2, 3, 10, 11]) is None
    assert new_datum_reason(held, sampled, [1, 2, 3, 10, 11, 4]) is None
    assert new_datum_reason(held, sampled, [1, 2, 9, 10, 11, 4]) == "prompt_rewrote_history"
    assert new_datum_reason(held, sampled, [9]) == "prompt_rewrote_history"
    assert new_datum_reason(held, sampled, [1, 2, 3, 9]) == "generation_not_echoed"
    assert new_datum_reason(held, sampled, [1, 2, 3, 10, 9, 4]) == "generation_not_echoed"
    assert new_datum_reason(held, sampled, [1, 2, 3, 10]) == "prompt_shorter"
    assert new_datum_reason(held, sampled, [1, 2]) == "prompt_shorter"
    assert new_datum_reason([], 0, [1, 2]) is None


def test_each_delegated_agent_starts_its_own_datum_and_judge_calls_are_not_packed():
    packing = _packing(
        [
            call("a0", 0, *FIRST),
            call("a0", 1, [1, 2, 3, 10, 11, 20], [30], [-0.3]),
            call("a0", 0, [5, 6], [7], [-0.6], agent="sub-1"),
            call("a0", 1, [5, 6, 7, 8], [9], [-0.7], agent="sub-1"),
            call("a0", 0, [5, 6], [8], [-0.8], agent="sub-2"),
            call("a0", 3, [1, 2], [3], [-0.9], role="judge"),
        ]
    )
    assert packing == AttemptPacking(
        calls=5, datums=3, reasons=Counter({NewDatumReason.DELEGATED_AGENT: 2})
    )


def test_an_attempt_of_only_delegated_calls_counts_no_reason_for_its_first_datum():
    packing = _packing(
        [
            call("a0", 0, [5, 6], [7], [-0.6], agent="sub-1"),
            call("a0", 0, [5, 6], [8], [-0.8], agent="sub-2"),
        ]
    )
    assert packing.reasons == Counter({NewDatumReason.DELEGATED_AGENT: 1})


def test_a_batch_counts_per_attempt_means_maxima_and_reasons_over_packed_attempts():
    calls = {
        "a0": [call("a0", 0, *FIRST), call("a0", 1, [1, 2, 3, 10, 11, 20], [30], [-0.3])],
        "a1": [
            call("a1", 0, *FIRST),
            call("a1", 1, [1, 7, 20], [30], [-0.3]),
            call("a1", 2, [1, 7, 20, 31, 40], [50], [-0.5]),
            call("a1", 0, [5, 6], [7], [-0.6], agent="sub-1"),
        ],
        "a2": [call("a2", 0, *FIRST)],
    }
    standings = [_standing("a0"), _standing("a1"), _standing("a2", qualified=False)]
    attempts = group_packing(standings, calls)
    assert sum(a.datums for a in attempts) == len(group_datums(standings, calls))
    packing = batch_packing(attempts)
    assert (packing.calls_per_attempt_mean, packing.calls_per_attempt_max) == (3.0, 4)
    assert (packing.datums_per_attempt_mean, packing.datums_per_attempt_max) == (2.5, 4)
    # In the reasons' declared order, whatever order they occurred in.
    assert list(packing.new_datum_reasons.items()) == [
        ("delegated_agent", 1),
        ("prompt_rewrote_history", 1),
        ("generation_not_echoed", 1),
    ]


def test_a_batch_that_packed_no_attempt_has_no_per_attempt_numbers():
    packing = batch_packing([])
    assert packing.calls_per_attempt_mean is None and packing.datums_per_attempt_max is None
    assert packing.new_datum_reasons == {}
