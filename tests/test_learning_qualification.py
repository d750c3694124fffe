"""Qualification: exclusions with reasons first, then group-centered advantages."""

from synth_pipelines.contracts.exclusion import ExclusionReason
from synth_pipelines.contracts.learning import QualifiedAttempt
from synth_pipelines.contracts.plan import Eligibility
from synth_pipelines.learning.qualification import qualify_group
from tests.learning_records import SAMPLER, assessment, call, outcome

ELIGIBILITY = Eligibility(drop_constant_reward_groups=True, min_qualified_attempts=2)


def _calls(*attempts: str) -> dict:
    return {a: [call(a, 0, [1, 2], [3], [-0.5])] for a in attempts}


def test_excluded_attempts_never_change_their_siblings_advantages():
    outcomes = [outcome(f"g0.a{n}") for n in range(4)]
    assessments = {
        "g0.a0": assessment("g0.a0", 1.0),
        "g0.a1": assessment("g0.a1", 0.0),
        "g0.a2": assessment("g0.a2", 1.0),
        "g0.a3": assessment("g0.a3", 1.0),
    }
    calls = _calls("g0.a0", "g0.a1", "g0.a2")
    standing = {
        s.attempt_id: s
        for s in qualify_group(outcomes, assessments, calls, {}, ELIGIBILITY, SAMPLER)
    }
    assert standing["g0.a3"].qualified is False
    assert standing["g0.a3"].exclusion == "no captured model calls"
    assert standing["g0.a3"].advantage is None
    assert standing["g0.a0"].advantage == standing["g0.a2"].advantage
    assert abs(standing["g0.a0"].advantage - 1 / 3) < 1e-6
    assert abs(standing["g0.a1"].advantage + 2 / 3) < 1e-6


def test_a_valid_zero_is_an_outcome_but_missing_or_invalid_evidence_is_an_exclusion():
    outcomes = [outcome(f"g0.a{n}") for n in range(5)]
    misaligned = call("g0.a3", 0, [1], [3, 4], [-0.5])
    stale = call("g0.a4", 0, [1], [3], [-0.5], sampler="tinker://other/sampler_weights/x")
    calls = {**_calls("g0.a0", "g0.a1", "g0.a2"), "g0.a3": [misaligned], "g0.a4": [stale]}
    assessments = {
        "g0.a0": assessment("g0.a0", 0.0),
        "g0.a1": assessment("g0.a1", None, valid=False),
        "g0.a2": assessment("g0.a2", 1.0),
        "g0.a3": assessment("g0.a3", 1.0),
        "g0.a4": assessment("g0.a4", 1.0),
    }
    problems = {"g0.a2": "checksum mismatch"}
    standing = {
        s.attempt_id: s
        for s in qualify_group(outcomes, assessments, calls, problems, ELIGIBILITY, SAMPLER)
    }
    assert standing["g0.a0"].qualified
    assert standing["g0.a1"].exclusion.startswith("no valid reward")
    assert standing["g0.a2"].exclusion == "evidence unusable: checksum mismatch"
    assert "2 sampled tokens but 1 logprobs" in standing["g0.a3"].exclusion
    assert "not this batch's policy" in standing["g0.a4"].exclusion
    assert standing["g0.a0"].group_exclusion.startswith("1 qualified attempt(s)")


def test_groups_without_reward_signal_are_excluded_with_their_reason():
    outcomes = [outcome(f"g0.a{n}") for n in range(3)]
    assessments = {f"g0.a{n}": assessment(f"g0.a{n}", 1.0) for n in range(3)}
    standing = qualify_group(outcomes, assessments, _calls(*assessments), {}, ELIGIBILITY, SAMPLER)
    assert all(s.qualified and not s.group_qualified for s in standing)
    assert standing[0].group_exclusion == "no reward signal: all 3 qualified attempts scored 1"
    kept = qualify_group(
        outcomes,
        assessments,
        _calls(*assessments),
        {},
        Eligibility(drop_constant_reward_groups=False, min_qualified_attempts=2),
        SAMPLER,
    )
    assert all(s.group_qualified and s.advantage == 0.0 for s in kept)


def test_calls_of_an_earlier_execution_of_the_attempt_are_not_learned_from():
    outcomes = [outcome(f"g0.a{n}") for n in range(2)]
    assessments = {"g0.a0": assessment("g0.a0", 1.0), "g0.a1": assessment("g0.a1", 0.0)}
    stale = call("g0.a1", 0, [9, 9], [9], [-0.5]).model_copy(update={"trial_id": "trial-before"})
    calls = {"g0.a0": _calls("g0.a0")["g0.a0"], "g0.a1": [stale]}
    standing = {
        s.attempt_id: s
        for s in qualify_group(outcomes, assessments, calls, {}, ELIGIBILITY, SAMPLER)
    }
    assert standing["g0.a1"].exclusion == "no captured model calls"


def test_every_exclusion_names_its_kind_beside_its_account_and_keeps_it_when_stored():
    outcomes = [outcome(f"g0.a{n}") for n in range(5)]
    misaligned = call("g0.a3", 0, [1], [3, 4], [-0.5])
    stale = call("g0.a4", 0, [1], [3], [-0.5], sampler="tinker://other/sampler_weights/x")
    calls = {**_calls("g0.a0", "g0.a2"), "g0.a3": [misaligned], "g0.a4": [stale]}
    assessments = {f"g0.a{n}": assessment(f"g0.a{n}", 1.0) for n in range(5)}
    assessments["g0.a1"] = assessment("g0.a1", None, valid=False)
    problems = {"g0.a2": "checksum mismatch"}
    standing = qualify_group(outcomes, assessments, calls, problems, ELIGIBILITY, SAMPLER)
    assert [s.exclusion_reason for s in standing] == [
        None,
        ExclusionReason.NO_VALID_REWARD,
        ExclusionReason.EVIDENCE_UNUSABLE,
        ExclusionReason.UNALIGNED_LOGPROBS,
        ExclusionReason.OTHER_POLICY,
    ]
    assert {s.group_exclusion_reason for s in standing} == {ExclusionReason.TOO_FEW_QUALIFIED}
    assert QualifiedAttempt.from_table(QualifiedAttempt.to_table(standing)) == standing
    constant = qualify_group(
        outcomes[:2],
        {a: assessment(a, 1.0) for a in ("g0.a0", "g0.a1")},
        _calls("g0.a0", "g0.a1"),
        {},
        ELIGIBILITY,
        SAMPLER,
    )
    assert {s.group_exclusion_reason for s in constant} == {ExclusionReason.CONSTANT_REWARD}
