"""Percentiles and their distribution-free confidence bounds."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from pytest_llmslo.metrics import (
    PERCENTILES,
    Distribution,
    lower_confidence_bound,
    lower_rank,
    percentile,
    samples_needed,
    upper_confidence_bound,
    upper_rank,
)


def test_percentile_linear_matches_numpy() -> None:
    rng = np.random.default_rng(7)
    x = rng.lognormal(3, 1, 1001)
    d = Distribution.of("ttft", x)
    for q in PERCENTILES:
        assert d.p(q) == pytest.approx(np.percentile(x, q, method="linear"))
        assert percentile(x, q) == pytest.approx(np.percentile(x, q))
    assert d.mean == pytest.approx(x.mean())
    assert d.std == pytest.approx(x.std())
    assert (d.min, d.max, d.count) == (x.min(), x.max(), 1001)


def test_percentile_drops_nan() -> None:
    x = [1.0, float("nan"), 3.0, float("inf")]
    assert percentile(x, 50) == pytest.approx(2.0)
    assert math.isnan(percentile([float("nan")], 50))
    assert Distribution.of("e2e", x).count == 2


def _brute_upper_k(n: int, q: float, c: float) -> int | None:
    p = Fraction(q).limit_denominator(10_000) / 100
    cdf = Fraction(0)
    for k in range(1, n + 1):
        cdf += math.comb(n, k - 1) * p ** (k - 1) * (1 - p) ** (n - k + 1)
        if cdf >= Fraction(c).limit_denominator(10_000):
            return k
    return None


def _brute_lower_k(n: int, q: float, c: float) -> int | None:
    p = Fraction(q).limit_denominator(10_000) / 100
    cc = Fraction(c).limit_denominator(10_000)
    best = None
    for k in range(1, n + 1):
        tail = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        if tail >= cc:
            best = k
    return best


@pytest.mark.parametrize("n", [1, 2, 5, 10, 29, 58, 59, 100, 298, 299, 300, 450])
@pytest.mark.parametrize("q", [50.0, 90.0, 95.0, 99.0])
def test_upper_rank_against_brute_force_binomial(n: int, q: float) -> None:
    assert upper_rank(n, q, 0.95) == _brute_upper_k(n, q, 0.95)


@pytest.mark.parametrize("n", [1, 3, 10, 60, 200])
@pytest.mark.parametrize("q", [5.0, 50.0, 95.0])
def test_lower_rank_against_brute_force_binomial(n: int, q: float) -> None:
    assert lower_rank(n, q, 0.95) == _brute_lower_k(n, q, 0.95)


def test_upper_rank_other_confidence_against_brute_force() -> None:
    for n in (10, 100, 700):
        for q in (50.0, 99.0):
            assert upper_rank(n, q, 0.99) == _brute_upper_k(n, q, 0.99)
            assert upper_rank(n, q, 0.8) == _brute_upper_k(n, q, 0.8)


def test_upper_bound_is_that_order_statistic() -> None:
    x = np.arange(1, 1001, dtype=float)  # X_(k) = k
    k = upper_rank(1000, 99.0)
    assert k is not None and k > 990
    assert upper_confidence_bound(np.random.default_rng(0).permutation(x), 99.0) == float(k)
    assert lower_confidence_bound(x, 99.0) == float(lower_rank(1000, 99.0))
    d = Distribution.of("ttft", x)
    assert d.ub(99) == float(k)
    assert d.ub(50) >= d.p(50)


def test_samples_needed() -> None:
    assert samples_needed(99, 0.95) == 299
    assert samples_needed(99.9, 0.95) == 2995
    assert samples_needed(95, 0.95) == 59
    assert samples_needed(50, 0.95) == 5
    assert samples_needed(99, 0.99) == 459
    assert samples_needed(5, 0.95, "lower") == 59
    for q in (50.0, 90.0, 99.0, 99.9):
        n = samples_needed(q)
        assert upper_rank(n, q) is not None
        assert upper_rank(n - 1, q) is None


def test_bound_none_below_samples_needed() -> None:
    x = np.linspace(1, 2, 298)
    assert upper_confidence_bound(x, 99.0) is None
    assert upper_confidence_bound(np.linspace(1, 2, 299), 99.0) == pytest.approx(2.0)


def test_large_n_bound_is_fast_and_sane() -> None:
    k = upper_rank(10_000_000, 99.0)
    assert k is not None
    # normal approximation: n p + z sqrt(n p (1-p)), z_0.95 = 1.645
    approx = 10_000_000 * 0.99 + 1.645 * math.sqrt(10_000_000 * 0.99 * 0.01)
    assert abs(k - approx) < 5


def test_confidence_validation() -> None:
    with pytest.raises(ValueError):
        samples_needed(99, 1.0)
    with pytest.raises(ValueError):
        upper_rank(10, 99, 0.0)


def test_distribution_round_trip_with_nan() -> None:
    d = Distribution.of("itl", [])
    back = Distribution.from_dict(json.loads(json.dumps(d.to_dict(), allow_nan=False)))
    assert back.count == 0 and math.isnan(back.mean) and math.isnan(back.p(50))
