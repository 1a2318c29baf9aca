"""Change points on synthetic series of known shifts (and none)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_llmslo.history.changepoint import (
    change_points,
    energy_split,
    segments,
    student_t_sf,
    t_test,
)


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [(2.776445, 4, 0.05), (12.7062, 1, 0.05), (2.228139, 10, 0.05), (0.0, 3, 1.0)],
)
def test_student_t_matches_the_tables(t: float, df: float, p: float) -> None:
    assert student_t_sf(t, df) == pytest.approx(p, abs=1e-5)
    assert student_t_sf(-t, df) == pytest.approx(p, abs=1e-5)


def test_t_test_of_sides_without_spread() -> None:
    assert t_test(np.array([1.0, 1.0]), np.array([2.0, 2.0])) == 0.0
    assert t_test(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 1.0


def test_a_constant_series_has_no_change_point() -> None:
    assert change_points([100.0] * 12) == []


def test_five_runs_with_a_shift_at_the_fourth() -> None:
    # A permutation test cannot call this significant (p >= 0.2); the t-test does,
    # Bonferroni-corrected for the two splits it was chosen from.
    (cp,) = change_points([100.0, 101.0, 99.0, 80.5, 79.6])
    assert cp.index == 3
    assert cp.before == pytest.approx(100.0)
    assert cp.change == pytest.approx(-0.1995, abs=1e-3)
    assert cp.p < 0.01


@pytest.mark.parametrize("seed", range(20))
def test_a_known_shift_is_found_at_its_run(seed: int) -> None:
    rng = np.random.default_rng(seed)
    at = int(rng.integers(4, 16))
    x = 100.0 + rng.normal(0.0, 2.0, 20)
    x[at:] *= 1.10  # a 10 % shift against 2 % noise
    (found,) = change_points(list(x))
    # A noisy run next to the shift may look like either side: one run off at most
    # (measured: 486 of 500 seeds exact, 498 within one run, none with a second point).
    assert abs(found.index - at) <= 1
    assert 0.05 < found.change < 0.16


def test_two_shifts_are_both_found() -> None:
    rng = np.random.default_rng(7)
    x = np.r_[rng.normal(100, 1, 10), rng.normal(120, 1, 10), rng.normal(90, 1, 10)]
    assert [c.index for c in change_points(list(x))] == [10, 20]
    assert segments(30, change_points(list(x))) == [(0, 10), (10, 20), (20, 30)]


def test_stationary_noise_rarely_cries_wolf() -> None:
    # 200 series of 20 runs, 3 % noise and no shift: at alpha = 0.01, Bonferroni-corrected
    # over the splits, about 1 % of series get a change point (measured: 4 of 500).
    false = sum(
        bool(change_points(list(np.random.default_rng(s).normal(100, 3, 20)))) for s in range(200)
    )
    assert false <= 6, f"{false} of 200 stationary series had a change point"


def test_a_change_below_min_change_is_not_a_change_point() -> None:
    x = [100.0, 100.1, 99.9, 100.0, 101.0, 101.1, 100.9, 101.0]  # +1 %, significant
    assert change_points(x, min_change=0.0)[0].index == 4
    assert change_points(x) == []  # below the default 2 %


def test_energy_split_needs_min_size_a_side() -> None:
    assert energy_split(np.array([1.0, 2.0, 3.0]), min_size=2) is None
    assert energy_split(np.array([1.0, 1.0, 5.0, 5.0]), min_size=2) == (2, pytest.approx(8.0))


@pytest.mark.parametrize(
    ("values", "kw", "match"),
    [
        ([1.0, float("nan"), 2.0], {}, "finite"),
        ([1.0, 2.0], {"alpha": 0.0}, "alpha"),
        ([1.0, 2.0], {"min_size": 0}, "min_size"),
    ],
)
def test_bad_input_is_named(values: list[float], kw: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        change_points(values, **kw)  # type: ignore[arg-type]
