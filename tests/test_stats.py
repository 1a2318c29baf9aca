"""Noise tests: the rank test against known values, the bootstrap interval, the proportion
test."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from pytest_llmslo import stats


def brute_force_u(x: list[float], y: list[float]) -> float:
    """U of x by counting pairs: x > y counts 1, a tie 1/2."""
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def reference_p(x: list[float], y: list[float]) -> float:
    """The two-sided normal-approximation p-value written out from the textbook formulas
    (tie-corrected variance, continuity correction), independently of stats.rankdata."""
    n1, n2 = len(x), len(y)
    n = n1 + n2
    u = brute_force_u(x, y)
    ties = Counter(x + y).values()
    var = n1 * n2 / 12.0 * ((n + 1) - sum(t**3 - t for t in ties) / (n * (n - 1)))
    z = (max(u, n1 * n2 - u) - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


# --------------------------------------------------------------------------- ranks


def test_rankdata_averages_ties():
    ranks, ties = stats.rankdata(np.array([10.0, 20.0, 10.0, 30.0, 20.0, 20.0]))
    assert ranks.tolist() == [1.5, 4.0, 1.5, 6.0, 4.0, 4.0]
    assert sorted(ties.tolist()) == [1, 2, 3]


def test_rankdata_empty():
    ranks, ties = stats.rankdata(np.array([]))
    assert ranks.size == 0 and ties.size == 0


# --------------------------------------------------------------------------- Mann-Whitney


def test_mann_whitney_scipy_documentation_example():
    # scipy.stats.mannwhitneyu(males, females, method="asymptotic") documents
    # statistic=17.0, pvalue=0.11134688653314041.
    males = [19, 22, 16, 29, 24]
    females = [20, 11, 17, 12]
    r = stats.mann_whitney_u(males, females)
    assert r.u == 17.0
    assert r.p_value == pytest.approx(0.11134688653314041, rel=1e-12)
    assert r.effect == pytest.approx(17 / 20)
    assert r.z > 0  # males tend to be larger


def test_mann_whitney_complete_separation():
    r = stats.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert r.u == 0.0
    # z = (25 - 12.5 - 0.5) / sqrt(25 * 11 / 12)
    z = 12.0 / math.sqrt(25 * 11 / 12)
    assert r.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert r.p_value == pytest.approx(0.0121857803553448, rel=1e-9)
    assert r.z < 0


@pytest.mark.parametrize(
    "x, y",
    [
        ([1, 2, 2, 3, 3, 3], [2, 3, 4, 4, 5]),
        ([5.0] * 4 + [6.0] * 3, [5.0, 6.0, 7.0, 7.0]),
        ([0.1, 0.4, 0.4, 0.9, 1.5, 2.0, 2.0], [0.4, 0.5, 0.9, 2.0, 3.0]),
    ],
)
def test_mann_whitney_with_ties_matches_the_formulas(x, y):
    r = stats.mann_whitney_u(x, y)
    assert r.u == brute_force_u(x, y)
    assert r.p_value == pytest.approx(reference_p(x, y), rel=1e-12)


def test_mann_whitney_random_against_brute_force():
    rng = np.random.default_rng(7)
    x = np.round(rng.normal(100, 10, 80), 0).tolist()  # rounding makes ties
    y = np.round(rng.normal(104, 10, 70), 0).tolist()
    r = stats.mann_whitney_u(x, y)
    assert r.u == brute_force_u(x, y)
    assert r.p_value == pytest.approx(reference_p(x, y), rel=1e-10)


def test_mann_whitney_is_symmetric():
    x, y = [3.0, 1.0, 4.0, 1.0, 5.0], [9.0, 2.0, 6.0, 5.0, 3.0, 5.0]
    a, b = stats.mann_whitney_u(x, y), stats.mann_whitney_u(y, x)
    assert a.u + b.u == len(x) * len(y)
    assert a.p_value == pytest.approx(b.p_value)
    assert a.z == pytest.approx(-b.z)


def test_mann_whitney_one_sided():
    x, y = [19, 22, 16, 29, 24], [20, 11, 17, 12]
    two = stats.mann_whitney_u(x, y)
    greater = stats.mann_whitney_u(x, y, alternative="greater")
    less = stats.mann_whitney_u(x, y, alternative="less")
    assert greater.p_value == pytest.approx(two.p_value / 2)
    assert less.p_value > 0.9


def test_mann_whitney_no_continuity():
    r = stats.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], continuity=False)
    z = 12.5 / math.sqrt(25 * 11 / 12)
    assert r.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)


def test_mann_whitney_all_equal_is_not_significant():
    r = stats.mann_whitney_u([3.0] * 5, [3.0] * 7)
    assert r.p_value == 1.0
    assert not r.significant()


def test_mann_whitney_drops_missing_values():
    r = stats.mann_whitney_u([1.0, None, float("nan"), 2.0], [3.0, float("inf"), 4.0])
    assert (r.n_x, r.n_y) == (2, 2)


def test_mann_whitney_needs_values():
    with pytest.raises(ValueError, match="both sides"):
        stats.mann_whitney_u([None, float("nan")], [1.0])
    with pytest.raises(ValueError, match="alternative"):
        stats.mann_whitney_u([1.0], [2.0], alternative="bigger")  # type: ignore[arg-type]


def test_mann_whitney_matches_scipy_when_installed():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x = np.round(rng.lognormal(3, 0.4, 300), 1)
    y = np.round(rng.lognormal(3.05, 0.4, 250), 1)
    for alternative in ("two-sided", "less", "greater"):
        ours = stats.mann_whitney_u(x, y, alternative=alternative)
        ref = scipy_stats.mannwhitneyu(x, y, alternative=alternative, method="asymptotic")
        assert ours.u == pytest.approx(ref.statistic)
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_seeded():
    rng = np.random.default_rng(0)
    x, y = rng.normal(100, 10, 300), rng.normal(100, 10, 300)
    a = stats.bootstrap_diff(x, y, 99, seed=5, resamples=500)
    b = stats.bootstrap_diff(x, y, 99, seed=5, resamples=500)
    c = stats.bootstrap_diff(x, y, 99, seed=6, resamples=500)
    assert (a.low, a.high) == (b.low, b.high)
    assert (a.low, a.high) != (c.low, c.high)


def test_bootstrap_estimate_is_the_difference_of_the_statistic():
    x, y = np.arange(1.0, 101.0), np.arange(11.0, 111.0)
    ci = stats.bootstrap_diff(x, y, 50, resamples=200)
    assert ci.estimate == pytest.approx(10.0)
    assert ci.low <= 10.0 <= ci.high
    mean = stats.bootstrap_diff(x, y, "mean", resamples=200)
    assert mean.estimate == pytest.approx(10.0)


def test_bootstrap_same_distribution_contains_zero():
    rng = np.random.default_rng(11)
    x, y = rng.normal(200, 20, 400), rng.normal(200, 20, 400)
    ci = stats.bootstrap_diff(x, y, 90, resamples=1000)
    assert ci.contains_zero


def test_bootstrap_shift_excludes_zero():
    rng = np.random.default_rng(12)
    x, y = rng.normal(200, 20, 400), rng.normal(240, 20, 400)
    ci = stats.bootstrap_diff(x, y, 50, resamples=1000)
    assert not ci.contains_zero
    assert 30 < ci.low < ci.high < 50


def test_bootstrap_of_a_tail_percentile_of_few_samples_is_degenerate():
    # Why the regression check judges percentiles with order statistics: resampling 30 values gives
    # P99s near the sample maximum only, and two samples of one distribution "differ".
    rng = np.random.default_rng(13)
    x, y = rng.normal(100, 10, 30), rng.normal(100, 10, 30)
    assert not stats.bootstrap_diff(x, y, 99).contains_zero
    assert not stats.quantile_shift(x, y, 99).significant


def test_bootstrap_large_samples_in_chunks():
    rng = np.random.default_rng(14)
    x = rng.exponential(50, 60_000)
    y = rng.exponential(50, 60_000) + 5
    ci = stats.bootstrap_diff(x, y, 50, resamples=60)
    assert ci.resamples == 60
    assert ci.low > 0


def test_bootstrap_rejects_bad_arguments():
    with pytest.raises(ValueError, match="both sides"):
        stats.bootstrap_diff([], [1.0])
    with pytest.raises(ValueError, match="percentile"):
        stats.bootstrap_diff([1.0], [2.0], 100)
    with pytest.raises(ValueError, match="confidence"):
        stats.bootstrap_diff([1.0], [2.0], 50, confidence=1.0)
    with pytest.raises(ValueError, match="resamples"):
        stats.bootstrap_diff([1.0], [2.0], 50, resamples=3)


def test_bootstrap_to_dict():
    d = stats.bootstrap_diff([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], 50, resamples=50).to_dict()
    assert d["test"] == "bootstrap" and d["n_x"] == 3 and d["stat"] == 50.0


# --------------------------------------------------------------------------- proportions


def test_two_proportion_known_value():
    r = stats.two_proportion_test(90, 100, 80, 100)
    # pooled p = 0.85, se = sqrt(0.85 * 0.15 * 0.02)
    z = -0.1 / math.sqrt(0.85 * 0.15 * 0.02)
    assert r.z == pytest.approx(z)
    assert r.p_value == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    assert r.p_value == pytest.approx(0.04767, abs=1e-4)
    assert r.significant()


def test_two_proportion_degenerate_and_bad_counts():
    assert stats.two_proportion_test(10, 10, 20, 20).p_value == 1.0
    assert stats.two_proportion_test(0, 10, 0, 20).p_value == 1.0
    with pytest.raises(ValueError, match="bad counts"):
        stats.two_proportion_test(11, 10, 1, 10)
    with pytest.raises(ValueError, match="bad counts"):
        stats.two_proportion_test(0, 0, 1, 10)


def test_normal_sf():
    assert stats.normal_sf(0.0) == pytest.approx(0.5)
    assert stats.normal_sf(1.959963984540054) == pytest.approx(0.025, rel=1e-9)


# --------------------------------------------------------------------------- order statistics


def test_quantile_interval_bounds_the_estimate():
    values = np.arange(1.0, 1001.0)
    iv = stats.quantile_interval(values, 50, 0.95)
    assert iv.low is not None and iv.high is not None
    assert iv.low < iv.estimate < iv.high
    # About +-1.96 sqrt(n)/2 = +-31 ranks around the median.
    assert 460 <= iv.low <= 475 and 525 <= iv.high <= 540


def test_quantile_interval_tail_of_few_samples_is_unbounded():
    iv = stats.quantile_interval(np.arange(100.0), 99, 0.95)
    assert iv.high is None  # bounding P99 from above takes 368 samples at 97.5 %
    assert iv.low is not None


def test_quantile_shift_same_distribution_is_not_significant():
    rng = np.random.default_rng(21)
    for q in (50, 90, 99):
        shift = stats.quantile_shift(rng.normal(100, 10, 2000), rng.normal(100, 10, 2000), q)
        assert shift.direction == 0


def test_quantile_shift_detects_a_rise_and_a_fall():
    rng = np.random.default_rng(22)
    base = rng.normal(100, 10, 2000)
    assert stats.quantile_shift(base, rng.normal(110, 10, 2000), 99).direction == 1
    assert stats.quantile_shift(base, rng.normal(90, 10, 2000), 50).direction == -1
    assert stats.quantile_shift(base, rng.normal(90, 10, 2000), 50).significant


def test_quantile_shift_rejects_bad_arguments():
    with pytest.raises(ValueError, match="confidence"):
        stats.quantile_shift([1.0], [2.0], 50, confidence=0.0)
    with pytest.raises(ValueError, match="finite"):
        stats.quantile_shift([], [2.0], 50)
    assert stats.quantile_shift([1.0, 2.0], [2.0, 3.0], 50).to_dict()["test"] == "order-statistic"
