"""Two capacity searches compared: by the capacity, and by the points where both ended."""

from __future__ import annotations

from dataclasses import replace

import pytest
from regression_helpers import CAP6, CAP7, CAP8, capacity, normal, point, row

from pytest_llmslo import regression
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.regression import Judging, tolerances


def test_capacity_drop_beyond_the_default_tolerance_regresses():
    at8 = point([100.0] * 30, level=LoadLevel.concurrency(8))
    at6 = point([100.0] * 30, level=LoadLevel.concurrency(6))
    c = regression.compare_capacity(
        capacity(8, CAP8), capacity(6, CAP6), at8, at6, engine="sim", test="t"
    )
    cap = row(c, "capacity")
    assert (cap.old, cap.new, cap.status) == (8.0, 6.0, "regressed")
    assert cap.tolerance.label == "15%" and cap.delta_pct == pytest.approx(-25.0)
    assert c.regressed and c.comparable and c.level == LoadLevel.concurrency(6)
    # The points at c8 and c6 are other loads: only the capacity is compared, and said so.
    assert [r.metric for r in c.rows] == ["capacity"]
    assert c.notes == (
        "capacity c8 (baseline) vs c6 (new): the points at different loads are not "
        "compared, the capacity is",
    )
    text = c.format()
    assert "REGRESSED" in text.splitlines()[0] and "capacity c8 (baseline) vs c6" in text
    props = dict(c.properties())
    assert props["llmslo.compare.capacity.old"] == "8"
    assert props["llmslo.compare.capacity.new"] == "6"
    assert props["llmslo.compare.capacity.status"] == "regressed"
    # Without points, the capacity alone.
    alone = regression.compare_capacity(capacity(8, CAP8), capacity(6, CAP6))
    assert alone.regressed and alone.notes == ()


def test_capacity_within_tolerance_and_given_tolerance():
    c = regression.compare_capacity(capacity(8, CAP8), capacity(7, CAP7))
    assert row(c, "capacity").status == "within tolerance" and not c.regressed
    wide = regression.compare_capacity(
        capacity(8, CAP8), capacity(6, CAP6), judging=Judging.of("capacity:30%")
    )
    assert row(wide, "capacity").status == "within tolerance"
    tight = regression.compare_capacity(
        capacity(8, CAP8), capacity(7, CAP7), judging=Judging.of("capacity:0%")
    )
    assert row(tight, "capacity").status == "regressed"
    better = regression.compare_capacity(capacity(6, CAP6), capacity(8, CAP8))
    assert row(better, "capacity").status == "improved"


def test_capacity_none_passed_is_zero():
    none = capacity(None, [(1, False)])
    c = regression.compare_capacity(capacity(8, CAP8), none)
    assert row(c, "capacity").new == 0.0 and c.regressed
    both = regression.compare_capacity(none, none)
    assert row(both, "capacity").status == "within tolerance"


def test_capacity_at_the_same_level_compares_the_points_too():
    old = point(normal(200, 20, 400, 1))  # c8
    new = point(normal(260, 20, 400, 2))
    c = regression.compare_capacity(
        capacity(8, CAP8), capacity(8, CAP8), old, new, judging=Judging.of("ttft_p50:10%")
    )
    assert [r.metric for r in c.rows] == ["capacity", "ttft_p50"]
    assert row(c, "capacity").status == "within tolerance"
    assert row(c, "ttft_p50").status == "regressed" and c.regressed
    assert c.level == LoadLevel.concurrency(8)


def test_capacity_searches_of_other_modes_are_not_compared():
    rate = replace(capacity(8, CAP8), mode="rate")
    c = regression.compare_capacity(capacity(8, CAP8), rate)
    assert not c.comparable and "capacity search mode" in c.problems[0]


def test_capacity_tolerance_parses_and_is_not_a_point_metric():
    tols = tolerances.parse_tolerances("capacity:10%,ttft_p50:10%")
    assert tols["capacity"].higher_is_better and tols["capacity"].label == "10%"
    with pytest.raises(ConfigError, match="does not fit capacity"):
        tolerances.parse_tolerances("capacity:2ms")
    p = point([100.0] * 30)
    c = regression.compare_points(p, p, tols)
    assert [r.metric for r in c.rows] == ["ttft_p50"]
