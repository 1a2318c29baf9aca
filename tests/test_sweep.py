"""Knee, saturation, Pareto and sweep extension on synthetic sweeps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pytest_llmslo.catalog import PERCENTILES
from pytest_llmslo.metrics import Distribution, RunSummary
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    find_knee,
    group_sweeps,
    knee_of,
    knee_points,
    pareto_front,
    point_at,
    point_status,
    split_sweeps,
    summary_stat,
    sweep_knees,
)
from pytest_llmslo.sweepextend import extend_levels, extend_sweep

# --------------------------------------------------------------------------- builders


@dataclass(frozen=True)
class _Verdict:
    """Only the fields of slo.Verdict that sweep.py reads."""

    passed: bool
    goodput_tok_s: float | None = None
    attainment: float | None = None
    run_valid: bool = True
    results: tuple[Any, ...] = field(default_factory=tuple)
    failures_decide: bool = False


def dist(name: str, p50: float, p99: float, count: int = 500) -> Distribution:
    pct = {q: p50 + (p99 - p50) * (q - 50) / 49 for q in PERCENTILES}
    pct[50.0], pct[99.0] = p50, p99
    return Distribution(
        name=name,
        count=count,
        mean=p50,
        std=1.0,
        min=p50 / 2,
        max=p99 * 1.5,
        percentiles=pct,
        upper_bounds={q: v * 1.05 for q, v in pct.items()},
        samples_needed={q: 10 for q in PERCENTILES},
    )


def summary(
    level: LoadLevel,
    thr: float,
    ttft99: float,
    *,
    e2e99: float | None = None,
    goodput: float | None = None,
    valid: bool = True,
    ttft_count: int = 500,
) -> RunSummary:
    e2e99 = ttft99 * 10 if e2e99 is None else e2e99
    return RunSummary(
        level=level,
        requests=500,
        completed=500,
        failed=0,
        failures={},
        error_rate=0.0,
        duration_s=10.0,
        distributions={
            "ttft": dist("ttft", ttft99 / 2, ttft99, count=ttft_count),
            "e2e": dist("e2e", e2e99 / 2, e2e99),
            "itl": dist("itl", 10.0, 20.0),
            "tpot": dist("tpot", 11.0, 21.0),
        },
        output_tok_s=thr,
        total_tok_s=thr * 3,
        req_s=thr / 256,
        goodput_tok_s=goodput,
        valid=valid,
        invalid_reasons=() if valid else ("schedule lag p99 40 ms",),
    )


def point(
    c: float,
    thr: float = 100.0,
    ttft99: float = 100.0,
    passed: bool | None = True,
    *,
    engine: str = "sim",
    test: str = "test_chat",
    goodput: float | None = None,
    valid: bool = True,
    rate: bool = False,
    **kw: Any,
) -> SweepPoint:
    level = LoadLevel.rate(c) if rate else LoadLevel.concurrency(int(c))
    verdict = None if passed is None else _Verdict(passed=passed, goodput_tok_s=goodput)
    s = summary(level, thr, ttft99, goodput=goodput, valid=valid, **kw)
    return SweepPoint(engine, test, level, s, verdict)  # type: ignore[arg-type]


LEVELS = (1, 4, 8, 16, 32, 48, 64)


def sweep(passes: dict[int, bool | None], **kw: Any) -> list[SweepPoint]:
    return [point(c, thr=100.0 * c, goodput=90.0 * c, passed=p, **kw) for c, p in passes.items()]


# --------------------------------------------------------------------------- status, stats


def test_point_status() -> None:
    assert point_status(point(1, passed=True)) == "pass"
    assert point_status(point(1, passed=False)) == "fail"
    assert point_status(point(1, passed=None)) == "unchecked"
    # An invalid client run is invalid whatever the verdict says...
    assert point_status(point(1, passed=True, valid=False)) == "invalid"
    # ... unless its failed requests alone fail it: they are the engine's.
    p = point(1, passed=False, valid=False)
    failed = replace(p, verdict=_Verdict(passed=False, failures_decide=True))
    assert point_status(failed) == "fail"


def test_summary_stat_handles_missing_and_empty() -> None:
    s = summary(LoadLevel.concurrency(1), 10.0, 80.0)
    assert summary_stat(s, "ttft", 99) == 80.0
    assert summary_stat(s, "ttft", "mean") == 40.0
    assert summary_stat(s, "ttfot", 99) is None  # not in the distributions
    assert summary_stat(s, "ttft", 12.5) is None  # not summarised
    empty = summary(LoadLevel.concurrency(1), 0.0, 80.0, ttft_count=0)
    assert summary_stat(empty, "ttft", 99) is None


# --------------------------------------------------------------------------- knee


def test_knee_monotone() -> None:
    pts = sweep({1: True, 4: True, 8: True, 16: True, 32: False, 48: False, 64: False})
    knee = find_knee(pts)
    assert knee.status == "found"
    assert knee.level == LoadLevel.concurrency(16)
    assert knee.index == 3
    assert knee.goodput_tok_s == 90.0 * 16
    assert knee.first_failure == LoadLevel.concurrency(32)
    assert knee.passed_above_failure == ()
    assert "c16" in knee.note and "c32 failed" in knee.note


def test_knee_noisy_is_the_highest_level_that_met_every_objective() -> None:
    # The knee is the highest level that met every objective; the miss below it is told.
    pts = sweep({1: True, 4: True, 8: False, 16: True, 32: False})
    knee = find_knee(pts)
    assert knee.level == LoadLevel.concurrency(16)
    assert knee.first_failure == LoadLevel.concurrency(8)
    assert knee.passed_above_failure == (LoadLevel.concurrency(16),)
    assert knee.note == "highest level meeting every objective: c16 (c8 missed below it)"


def test_knee_all_pass() -> None:
    knee = find_knee(sweep(dict.fromkeys(LEVELS, True)))
    assert knee.status == "all_passed"
    assert knee.level == LoadLevel.concurrency(64)
    assert knee.first_failure is None
    assert "extend" in knee.note


def test_knee_none_pass() -> None:
    knee = find_knee(sweep(dict.fromkeys(LEVELS, False)))
    assert knee.status == "none_passed"
    assert knee.level is None and knee.index is None and knee.goodput_tok_s is None
    assert knee.first_failure == LoadLevel.concurrency(1)


@pytest.mark.parametrize(("passed", "status"), [(True, "all_passed"), (False, "none_passed")])
def test_knee_single_level(passed: bool, status: str) -> None:
    knee = find_knee(sweep({8: passed}))
    assert knee.status == status
    assert (knee.level == LoadLevel.concurrency(8)) is passed
    assert knee.saturation_level is None  # one level cannot show saturation


def test_knee_skips_invalid_client_runs() -> None:
    pts = sweep({1: True, 4: True, 8: True, 16: True, 32: False})
    pts[2] = point(8, thr=800, passed=False, valid=False)  # client-bound: tells nothing
    pts.append(point(64, thr=2000, passed=True, valid=False))
    knee = find_knee(pts)
    assert knee.level == LoadLevel.concurrency(16)
    assert knee.passed_above_failure == ()  # the invalid c64 pass does not count
    assert "inconclusive" in knee.note and "c8" in knee.note and "c64" in knee.note


def test_knee_without_verdicts_or_points() -> None:
    knee = find_knee(sweep(dict.fromkeys(LEVELS, None)))
    assert knee.status == "unchecked" and knee.level is None
    only_invalid = [point(1, valid=False), point(2, valid=False)]
    assert find_knee(only_invalid).status == "unchecked"
    assert find_knee([]).status == "empty"


def test_knee_index_refers_to_the_input_order() -> None:
    pts = sweep({1: True, 4: True, 8: True, 16: False})
    shuffled = [pts[3], pts[0], pts[2], pts[1]]
    knee = find_knee(shuffled)
    assert knee.level == LoadLevel.concurrency(8)
    assert shuffled[knee.index] is pts[2]  # type: ignore[index]


def test_knee_duplicate_level_keeps_the_last_point() -> None:
    pts = sweep({1: True, 4: True, 8: False})
    pts.append(point(8, thr=800, passed=True))  # re-run of c8 passed
    knee = find_knee(pts)
    assert knee.level == LoadLevel.concurrency(8) and knee.index == 3


def test_knee_rejects_mixed_sweeps() -> None:
    with pytest.raises(ValueError, match="split_sweeps"):
        find_knee([point(1, engine="a"), point(2, engine="b")])
    with pytest.raises(ValueError, match=r"load modes .* split_sweeps"):
        find_knee([point(1), point(2.0, rate=True)])


def test_knee_round_trips_through_dict() -> None:
    knee = find_knee(sweep({1: True, 4: False, 8: True, 16: False}))
    assert Knee.from_dict(knee.to_dict()) == knee


def test_group_sweeps_keeps_first_appearance_order() -> None:
    pts = [point(1, engine="b"), point(1, engine="a"), point(4, engine="b")]
    groups = group_sweeps(pts)
    assert list(groups) == [("b", "test_chat"), ("a", "test_chat")]
    assert len(groups[("b", "test_chat")]) == 2


# --------------------------------------------------------------------------- saturation


def _curve(thr: list[float], ttft: list[float], levels: tuple[int, ...] = LEVELS) -> list:
    return [point(c, thr=t, ttft99=lat) for c, t, lat in zip(levels, thr, ttft, strict=True)]


def test_saturation_level() -> None:
    thr = [100, 390, 760, 1400, 1500, 1550, 1560]
    ttft = [50, 55, 60, 80, 200, 400, 700]
    knee = find_knee(_curve(thr, ttft))
    # Above c32 throughput never reaches 1500 * 1.1 and TTFT keeps rising.
    assert knee.saturation_level == LoadLevel.concurrency(32)
    assert knee.saturation_index == 4


def test_saturation_ignores_a_noisy_dip() -> None:
    thr = [100, 390, 395, 1400, 2700, 2800, 2810]
    ttft = [50, 55, 60, 80, 200, 400, 700]
    knee = find_knee(_curve(thr, ttft))
    # c4 -> c8 grew < 10 %, but c16 is far above: not saturated there.
    assert knee.saturation_level == LoadLevel.concurrency(32)


def test_saturation_needs_rising_latency() -> None:
    thr = [100, 390, 760, 1400, 1400, 1400, 1400]
    flat = [50.0] * 7
    assert find_knee(_curve(thr, flat)).saturation_level is None
    # e2e rising alone is enough.
    pts = [point(c, thr=t, ttft99=50.0, e2e99=100.0 * c) for c, t in zip(LEVELS, thr, strict=True)]
    assert find_knee(pts).saturation_level == LoadLevel.concurrency(16)


def test_saturation_excludes_invalid_runs() -> None:
    pts = _curve([100, 390, 760, 1400], [50, 55, 60, 80], LEVELS[:4])
    # A client-bound run shows a flat throughput; it must not read as saturation.
    pts.append(point(32, thr=1400, ttft99=300, valid=False))
    assert find_knee(pts).saturation_level is None


# --------------------------------------------------------------------------- Pareto


def test_pareto_front_basic() -> None:
    a = point(1, thr=100, ttft99=50, engine="a")
    b = point(1, thr=200, ttft99=80, engine="b")
    c = point(1, thr=150, ttft99=90, engine="c")  # dominated by b
    d = point(1, thr=50, ttft99=60, engine="d")  # dominated by a
    assert pareto_front([a, b, c, d]) == [True, True, False, False]


def test_pareto_front_ties_and_exclusions() -> None:
    a = point(1, thr=100, ttft99=50, engine="a")
    twin = point(1, thr=100, ttft99=50, engine="b")
    invalid = point(1, thr=10_000, ttft99=1, engine="c", valid=False)
    no_ttft = point(1, thr=10_000, ttft99=1, engine="d", ttft_count=0)
    same_thr_worse = point(1, thr=100, ttft99=51, engine="e")
    assert pareto_front([a, twin, invalid, no_ttft, same_thr_worse]) == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert pareto_front([]) == []


def test_pareto_front_on_goodput() -> None:
    a = point(1, thr=200, ttft99=50, goodput=10)
    b = point(2, thr=100, ttft99=50, goodput=90)
    assert pareto_front([a, b]) == [True, False]
    assert pareto_front([a, b], throughput="goodput_tok_s") == [False, True]


def test_pareto_at_knees_and_over_all_points() -> None:
    fast = [
        point(1, thr=100, ttft99=40, engine="fast"),
        point(8, thr=700, ttft99=90, engine="fast"),
        point(32, thr=1500, ttft99=600, engine="fast", passed=False),
    ]
    slow = [
        point(1, thr=90, ttft99=60, engine="slow"),
        point(8, thr=500, ttft99=200, engine="slow"),
        point(32, thr=1900, ttft99=900, engine="slow", passed=False),
    ]
    knees = knee_points(fast + slow)
    assert [(p.engine, p.level.label) for p in knees] == [("fast", "c8"), ("slow", "c8")]
    assert pareto_front(knees) == [True, False]
    everything = fast + slow
    assert pareto_front(everything) == [True, True, True, False, False, True]


def test_knee_points_uses_given_knees() -> None:
    pts = sweep({1: True, 4: True, 8: False})
    forced = Knee(LoadLevel.concurrency(1), 0, 90.0, None)
    assert knee_points(pts, {"sim": forced})[0].level == LoadLevel.concurrency(1)
    assert knee_points(pts, {("sim", "test_chat"): forced})[0] is pts[0]
    assert knee_points(sweep({1: False})) == []


# --------------------------------------------------------------------------- extension


def _levels(*cs: int) -> list[LoadLevel]:
    return [LoadLevel.concurrency(c) for c in cs]


def test_extend_levels_growth_and_stop() -> None:
    levels = _levels(*LEVELS)
    assert extend_levels(levels, 1000.0, 800.0) == LoadLevel.concurrency(96)
    assert extend_levels(levels, 1000.0, 500.0) == LoadLevel.concurrency(96)  # not below yet
    assert extend_levels(levels, 1000.0, 499.9) is None
    assert extend_levels(_levels(1), 10.0, 10.0) == LoadLevel.concurrency(2)
    assert extend_levels(_levels(2), 10.0, 10.0) == LoadLevel.concurrency(3)
    assert extend_levels(_levels(48), 10.0, 10.0) == LoadLevel.concurrency(72)


@pytest.mark.parametrize(("best", "last"), [(None, 10.0), (0.0, 0.0), (10.0, None), (math.nan, 1)])
def test_extend_levels_stops_without_goodput(best: float | None, last: float | None) -> None:
    assert extend_levels(_levels(*LEVELS), best, last) is None


def test_extend_levels_rate_and_cap() -> None:
    nxt = extend_levels(
        [LoadLevel.rate(1.0, "constant", seed=3), LoadLevel.rate(2.5, "constant", seed=3)], 5, 5
    )
    assert nxt == LoadLevel("rate", 3.75, "constant", 3)
    assert extend_levels([LoadLevel.rate(0.7)], 5, 5) == LoadLevel.rate(1.05)
    assert extend_levels(_levels(64), 1, 1, max_value=80) == LoadLevel.concurrency(80)
    assert extend_levels(_levels(80), 1, 1, max_value=80) is None
    with pytest.raises(ValueError):
        extend_levels([], 1, 1)
    with pytest.raises(ValueError):
        extend_levels(_levels(1), 1, 1, factor=1.0)


def test_extend_sweep_until_goodput_halves() -> None:
    # Goodput grows to c=100, then collapses: the loop must stop soon after.
    def goodput(c: float) -> float:
        return 10.0 * c if c <= 100 else max(1000.0 - 15.0 * (c - 100), 0.0)

    pts = [point(c, thr=10.0 * c, goodput=goodput(c)) for c in LEVELS]
    steps = 0
    while (nxt := extend_sweep(pts)) is not None:
        steps += 1
        assert steps < 20
        pts.append(point(nxt.value, thr=10.0 * nxt.value, goodput=goodput(nxt.value)))
    assert [p.level.label for p in pts[len(LEVELS) :]] == ["c96", "c144"]
    best = max(goodput(p.level.value) for p in pts)
    assert goodput(pts[-1].level.value) < 0.5 * best


def test_extend_sweep_stops_on_an_invalid_last_run() -> None:
    pts = [point(1, goodput=10.0), point(4, goodput=40.0, valid=False)]
    assert extend_sweep(pts) is None
    assert extend_sweep([]) is None


def test_split_sweeps_and_sweep_knees() -> None:
    conc = sweep({1: True, 4: True, 8: False})
    rates = [point(r, rate=True, passed=r < 3) for r in (1.0, 2.0, 4.0)]
    other = sweep({1: True}, engine="b")
    split = split_sweeps(conc + rates + other)
    assert [(key, [p.level.label for p in pts]) for key, pts in split] == [
        (("sim", "test_chat"), ["c1", "c4", "c8"]),
        (("sim", "test_chat"), ["r1", "r2", "r4"]),
        (("b", "test_chat"), ["c1"]),
    ]
    # A given knee applies to the sweep of its own load mode only.
    given = Knee(LoadLevel.concurrency(1), 0, 1.0, None)
    knees = sweep_knees(conc + rates, {("sim", "test_chat"): given})
    assert knees[0][2] is given
    assert knees[1][2].level == LoadLevel.rate(2.0)
    assert [p.level.label for p in knee_points(conc + rates + other)] == ["c4", "r2", "c1"]
    assert point_at(conc, LoadLevel.concurrency(4)) is conc[1]
    assert point_at(conc, None) is None
    assert knee_of(conc).level == LoadLevel.concurrency(4)
