import pytest
from pydantic import TypeAdapter, ValidationError

from synth_pipelines.contracts.plan import Plan, TrainPlan

plans = TypeAdapter(Plan)


def test_unknown_plan_field_is_refused_by_name():
    with pytest.raises(ValidationError, match="attempts_per_tsk"):
        plans.validate_python({"kind": "eval", "attempts_per_tsk": 3})


def test_plan_kind_selects_the_plan_shape():
    assert plans.validate_python({"kind": "execute"}).kind == "execute"
    with pytest.raises(ValidationError, match="kind"):
        plans.validate_python({"kind": "benchmark"})


def test_train_plan_needs_exactly_one_length():
    with pytest.raises(ValidationError, match="exactly one of 'batches' or 'epochs'"):
        plans.validate_python({"kind": "train"})
    plan = plans.validate_python({"kind": "train", "epochs": 2, "groups_per_batch": 4})
    assert isinstance(plan, TrainPlan)
    assert plan.batch_count(10) == 5


def test_unknown_environment_provider_is_refused():
    with pytest.raises(ValidationError, match="environment provider 'dockr' is unknown"):
        plans.validate_python({"kind": "eval", "environment": {"provider": "dockr"}})
