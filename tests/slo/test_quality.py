"""Accuracy objectives judged with the Wilson score bound: pass, fail or inconclusive."""

from __future__ import annotations

import pytest

from pytest_llmslo import accuracy, assert_quality
from pytest_llmslo.errors import ConfigError, Inconclusive, LoadError, SloViolation
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.slo import bind_run, judge_quality, parse_quality, wilson_interval


def run_with(items: int, correct: int) -> Run:
    quality = {"task": "arithmetic", "items": items, "correct": correct, "failed": 0}
    return Run(
        level=LoadLevel.concurrency(1), records=(), start_ns=0, end_ns=1, meta={"quality": quality}
    )


def test_wilson_bounds() -> None:
    lo, hi = wilson_interval(30, 30)
    assert 0.91 < lo < 0.92 and hi == pytest.approx(1.0)
    lo, hi = wilson_interval(50, 100)
    assert lo < 0.5 < hi and abs((lo + hi) / 2 - 0.5) < 1e-9
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(3, 4, 1.0)
    # More items narrow the interval.
    assert wilson_interval(950, 1000)[0] > wilson_interval(95, 100)[0]


def test_thirty_items_all_right_do_not_show_95_percent() -> None:
    with pytest.raises(Inconclusive, match=r"30/30 right = 100.0%.*inconclusive; about \d+ items"):
        assert_quality(run_with(30, 30), accuracy >= 0.95)


def test_enough_items_pass_and_a_clear_miss_fails() -> None:
    verdict = assert_quality(run_with(400, 396), accuracy >= 0.95)
    assert verdict.passed and verdict.results[0].lower >= 0.95
    with pytest.raises(
        SloViolation,
        match=r"quality objectives missed.*160/200 right = 80.0% \(bounds 0.750..0.842\) -> fail",
    ) as err:
        assert_quality(run_with(200, 160), accuracy >= 0.95)
    assert err.value.verdict.outcome == "fail"  # type: ignore[attr-defined]


def test_the_current_run_is_judged_and_a_run_without_evals_says_how_to_ask() -> None:
    bind_run(run_with(400, 400))
    assert assert_quality(accuracy > 0.9).passed
    bind_run(Run(level=LoadLevel.concurrency(1), records=(), start_ns=0, end_ns=1, meta={}))
    with pytest.raises(LoadError, match="--slo-eval arithmetic"):
        assert_quality(accuracy >= 0.9)


def test_a_level_without_answers_is_inconclusive() -> None:
    verdict = judge_quality(run_with(0, 0), (accuracy >= 0.5,))
    assert verdict.outcome == "inconclusive"


def test_objectives_refuse_truth_tests_and_bad_thresholds() -> None:
    with pytest.raises(TypeError, match="assert_quality"):
        assert accuracy >= 0.9
    with pytest.raises(ValueError, match="share in"):
        accuracy >= 95  # noqa: B015
    with pytest.raises(TypeError):
        assert_quality(run_with(10, 10))


def test_parse_quality() -> None:
    assert parse_quality("accuracy>=0.95") == (accuracy >= 0.95,)
    assert parse_quality(" accuracy > 90% ") == (accuracy > 0.9,)
    with pytest.raises(ConfigError, match=r"accuracy>=0\.95"):
        parse_quality("accuracy<0.5")
    with pytest.raises(ConfigError, match="share in"):
        parse_quality("accuracy>=2")
