"""The capacity search: an exponential probe then a bisection, on synthetic pass/fail
curves; its spec's checks."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from pytest_llmslo.capacity import DEFAULT_MAX_PROBES, CapacitySearch, CapacitySpec
from pytest_llmslo.records import LoadLevel

# --------------------------------------------------------------------------- capacity search


def _search(passes: Any, spec: CapacitySpec) -> CapacitySearch:
    search = CapacitySearch(spec)
    while (level := search.next_level()) is not None:
        search.record(level, passes(level.value))
        assert search.probes < 100
    return search


def test_capacity_search_monotone_concurrency() -> None:
    for true_capacity in [*range(1, 130), 255, 256, 257, 1000]:
        r = _search(lambda c, t=true_capacity: c <= t, CapacitySpec("concurrency")).result
        assert r.done
        assert r.capacity == LoadLevel.concurrency(true_capacity)
        assert r.upper == r.lower + 1  # type: ignore[operator]
        # Exponential probe plus bisection: about 2 log2(C) levels, not C.
        assert r.probes <= 2 * math.ceil(math.log2(true_capacity + 1)) + 1
        assert r.probes == len(r.history)
        assert len({lv for lv, _ in r.history}) == r.probes  # no level run twice


def test_capacity_search_none_pass() -> None:
    r = _search(lambda c: False, CapacitySpec("concurrency")).result
    assert r.capacity is None and r.probes == 1 and r.upper == 1
    assert "no capacity" in r.reason


def test_capacity_search_none_pass_from_a_higher_start() -> None:
    r = _search(lambda c: False, CapacitySpec("concurrency", start=8)).result
    assert r.capacity is None
    assert [lv.label for lv, _ in r.history] == ["c8", "c4", "c2", "c1"]


def test_capacity_search_probes_down_from_a_high_start() -> None:
    r = _search(lambda c: c <= 5, CapacitySpec("concurrency", start=16)).result
    assert r.capacity == LoadLevel.concurrency(5)


def test_capacity_search_all_pass_up_to_max() -> None:
    r = _search(lambda c: True, CapacitySpec("concurrency", max_value=100)).result
    assert r.capacity == LoadLevel.concurrency(100) and r.upper is None
    assert [lv.value for lv, _ in r.history] == [1, 2, 4, 8, 16, 32, 64, 100]
    assert "max_value" in r.reason


@pytest.mark.parametrize("true_rate", [0.3, 1.0, 7.3, 42.0])
def test_capacity_search_rate(true_rate: float) -> None:
    s = CapacitySpec("rate", arrival="constant", seed=7)
    r = _search(lambda v: v <= true_rate, s).result
    assert r.capacity is not None and r.capacity.mode == "rate"
    assert r.capacity.arrival == "constant" and r.capacity.seed == 7
    assert r.lower <= true_rate < r.upper  # type: ignore[operator]
    assert r.upper - r.lower <= max(0.01, 0.05 * r.lower)  # type: ignore[operator]


def test_capacity_search_rate_below_minimum() -> None:
    r = _search(lambda v: False, CapacitySpec("rate", min_value=0.1)).result
    assert r.capacity is None
    assert min(lv.value for lv, _ in r.history) >= 0.1


@pytest.mark.parametrize("seed", range(30))
def test_capacity_search_noisy_curve(seed: int) -> None:
    rng = random.Random(seed)

    def passes(c: float) -> bool:
        # Always passes below 40, never at 60 or above, a coin weighted by load between.
        if c < 40:
            return True
        if c >= 60:
            return False
        return rng.random() < (60 - c) / 20

    r = _search(passes, CapacitySpec("concurrency")).result
    assert r.capacity is not None
    # A level that passed, with a failure right above it: inside the noisy band.
    assert 39 <= r.capacity.value <= 59
    assert r.upper == r.lower + 1  # type: ignore[operator]
    assert r.probes <= 14


def test_capacity_search_invalid_run_bounds_from_above() -> None:
    r = _search(lambda c: True if c < 20 else None, CapacitySpec("concurrency")).result
    assert r.client_limited
    assert r.capacity == LoadLevel.concurrency(19)


def test_capacity_search_protocol_errors_and_budget() -> None:
    s = CapacitySearch(CapacitySpec("concurrency"))
    with pytest.raises(ValueError, match="pending"):
        s.record(LoadLevel.concurrency(1), True)
    first = s.next_level()
    assert first == LoadLevel.concurrency(1)
    assert s.next_level() == first  # asking again does not advance
    with pytest.raises(ValueError, match="pending level is c1"):
        s.record(LoadLevel.concurrency(2), True)
    s.record(first, True)  # type: ignore[arg-type]
    budget = _search(lambda c: c <= 1000, CapacitySpec("concurrency", max_probes=5)).result
    assert budget.probes == 5 and "budget" in budget.reason
    assert budget.capacity == LoadLevel.concurrency(16)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "tokens"},
        {"factor": 1.0},
        {"start": 0},
        {"start": 1.5},
        {"max_value": 0.5},
        {"max_probes": 0},
    ],
)
def test_capacity_search_rejects_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CapacitySpec(**kwargs)


def test_capacity_search_fractional_max_concurrency() -> None:
    r = _search(lambda c: True, CapacitySpec("concurrency", max_value=100.5)).result
    assert r.capacity == LoadLevel.concurrency(100)
    assert len({lv for lv, _ in r.history}) == r.probes  # 100 is not probed twice


def test_capacity_search_rate_levels_are_round() -> None:
    r = _search(lambda v: v <= 7.3, CapacitySpec("rate")).result
    values = [lv.value for lv, _ in r.history]
    assert values[:4] == [1.0, 2.0, 4.0, 8.0]
    assert all(v == float(f"{v:.3g}") for v in values)
    fine = CapacitySpec("rate", resolution=1e-6, rel_resolution=0.0, max_probes=60)
    r = _search(lambda v: v <= 7.3, fine).result
    assert r.reason == "bracketed to the resolution"
    assert r.lower <= 7.3 < r.upper and r.upper - r.lower <= 1e-6  # type: ignore[operator]


def test_capacity_search_budget_reached_with_the_bracket() -> None:
    # c <= 1: probes c1 (pass), c2 (fail) and the bracket is closed after exactly 2 levels.
    r = _search(lambda c: c <= 1, CapacitySpec("concurrency", max_probes=2)).result
    assert r.probes == 2 and r.reason == "bracketed to the resolution"


def test_spec_of_a_tests_first_level_keeps_the_levels_shape() -> None:
    # --slo-capacity searches from the test's first level; a rate search keeps its
    # arrival process, seed and burstiness in every probe.
    level = LoadLevel.rate(2.0, "gamma", seed=3, burstiness=0.5)
    spec = CapacitySpec.from_level(level, max_value=8.0)
    assert (spec.mode, spec.start, spec.max_value) == ("rate", 2.0, 8.0)
    search = CapacitySearch(spec)
    first = search.next_level()
    assert first == level
    search.record(first, True)  # type: ignore[arg-type]
    assert search.next_level() == level.scaled(4.0)
    closed = CapacitySpec.from_level(LoadLevel.concurrency(4), max_value=None)
    assert closed == CapacitySpec("concurrency", start=4)


def test_a_spec_without_a_budget_gets_the_default_one() -> None:
    r = _search(lambda c: True, CapacitySpec("rate")).result
    assert r.probes == DEFAULT_MAX_PROBES and "budget" in r.reason
