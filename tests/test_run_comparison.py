"""pass@1 comparisons: Wilson intervals and Fisher's exact test against published values."""

from __future__ import annotations

import pytest

from synth_pipelines.runtime.comparison import Proportion, fisher_exact

pytestmark = pytest.mark.usefixtures("cli_gateway")


def test_wilson_interval_matches_the_published_formula():
    low, high = Proportion(5, 10).wilson()
    assert low == pytest.approx(0.2366, abs=1e-4)
    assert high == pytest.approx(0.7634, abs=1e-4)
    low, high = Proportion(0, 10).wilson()
    assert low == 0.0
    assert high == pytest.approx(0.2775, abs=1e-4)


def test_no_assessed_attempts_have_no_rate_and_no_interval():
    assert Proportion(0, 0).rate is None
    assert Proportion(0, 0).wilson() is None


def test_fisher_exact_matches_the_tea_tasting_table():
    # Fisher's lady tasting tea: 3 of 4 right in each row; two-sided p = 0.4857,
    # one-sided p = 0.2429.
    result = fisher_exact(Proportion(1, 4), Proportion(3, 4))
    assert result.two_sided == pytest.approx(0.4857, abs=1e-4)
    assert result.greater == pytest.approx(0.2429, abs=1e-4)


def test_fisher_exact_on_a_large_improvement_is_significant():
    # 6/64 before, 40/64 after: R's fisher.test gives p < 1e-10.
    result = fisher_exact(Proportion(6, 64), Proportion(40, 64))
    assert result.two_sided < 1e-9
    assert result.greater < result.two_sided


def test_identical_runs_are_not_significant():
    result = fisher_exact(Proportion(10, 64), Proportion(10, 64))
    assert result.two_sided == pytest.approx(1.0)
    assert result.greater > 0.5


def test_run_compare_reports_pass_at_1_of_two_evaluations(state, tmp_path):
    import json

    from typer.testing import CliRunner

    from synth_pipelines.cli.main import app
    from tests.agent_runs import evaluate, one_task_dataset, profile_document

    dataset = one_task_dataset(tmp_path, "write-robots-txt")
    useless = evaluate(dataset, profile_document("useless.json"), attempts=2)
    oracle = evaluate(dataset, profile_document("oracle.json"), attempts=2)
    result = CliRunner().invoke(app, ["run", "compare", useless.run_id, oracle.run_id, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["baseline"]["pass_at_1"] == 0.0
    assert document["candidate"]["pass_at_1"] == 1.0
    assert document["difference"] == 1.0
    assert document["fisher_p_two_sided"] == pytest.approx(1 / 3)
    assert document["notes"] == []
