"""The noise bound of throughput and goodput from their per-window rates, and the smallest
change each comparison row could have detected, on runs of known timings."""

from __future__ import annotations

import dataclasses
import math

import pytest
from regression_helpers import normal, point, row

from pytest_llmslo import regression
from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.regression.detectable import min_detectable, window_rates, window_se
from pytest_llmslo.sweep import SweepPoint

TOLS = "throughput:0.1%,req_s:0.1%,ttft_p50:1%,ttft_p99:1%,attainment:1pp"


def test_window_rates_are_the_runs_rate_without_its_ramp_and_drain() -> None:
    p = point(normal(100, 20, 200, 1))
    rates = window_rates(p, "output_tok_s")
    assert rates is not None and len(rates) == 10
    assert rates.mean() == pytest.approx(p.summary.output_tok_s, rel=0.03)
    reqs = window_rates(p, "req_s")
    assert reqs is not None and reqs.mean() == pytest.approx(p.summary.req_s, rel=0.1)


def test_a_closed_loops_waves_do_not_make_the_windows_lurch() -> None:
    # Requests sent back to back end one after another; spread over their generation,
    # their tokens give every window about the same rate: a small standard error.
    p = point([100.0] * 200)
    rates = window_rates(p, "output_tok_s")
    assert rates is not None
    assert window_se(rates) < 0.01 * rates.mean()


def test_no_window_rates_without_samples_or_with_few_requests() -> None:
    assert window_rates(point(normal(100, 20, 200, 1), samples=False), "output_tok_s") is None
    assert window_rates(point(normal(100, 20, 15, 1)), "output_tok_s") is None


def test_throughput_of_two_runs_of_one_engine_is_noise() -> None:
    old, new = point(normal(100, 20, 200, 1)), point(normal(100, 20, 200, 2))
    c = regression.compare_points(old, new, TOLS)
    r = row(c, "throughput")
    assert r.delta_pct is not None and abs(r.delta_pct) > 0.1  # beyond the tolerance ...
    assert r.status == "noise"  # ... but within the runs' own spread
    assert r.noise is not None and r.noise.method == "windows" and r.noise.noise
    assert r.noise.low is not None and r.noise.low < 0 < (r.noise.high or 0)
    assert not c.regressed


def test_a_slower_run_regresses_beyond_its_windows() -> None:
    old = point(normal(100, 20, 200, 1))
    new = point(normal(100, 20, 200, 2), duration_scale=1.3)
    r = row(regression.compare_points(old, new, TOLS), "throughput")
    assert r.status == "regressed"
    assert r.noise is not None and r.noise.noise is False and (r.noise.p_value or 1) < 0.05


def test_every_row_reports_what_it_could_have_detected() -> None:
    old, new = point(normal(100, 20, 200, 1)), point(normal(100, 20, 200, 2))
    c = regression.compare_points(old, new, TOLS)
    ra, rb = window_rates(old, "output_tok_s"), window_rates(new, "output_tok_s")
    assert ra is not None and rb is not None
    expected = (1.959964 + 0.841621) * math.hypot(window_se(ra), window_se(rb))
    assert row(c, "throughput").mde == pytest.approx(expected, rel=1e-4)
    assert 0 < (row(c, "ttft_p50").mde or 0) < 20  # ms, against a 20 ms spread
    # Bounding a P99 from above takes 435 requests a side: with 200 it cannot be told.
    assert row(c, "ttft_p99").mde is None
    assert 0 < (row(c, "attainment").mde or 0) < 0.05
    text = c.format()
    assert "detectable" in text.splitlines()[1]
    assert "per-window rates" in text or "within tolerance" in text


def test_more_requests_detect_smaller_changes() -> None:
    spec = METRIC_SPECS["ttft_p50"]
    small = min_detectable(spec, point(normal(100, 20, 60, 1)), point(normal(100, 20, 60, 2)), 0.95)
    large = min_detectable(
        spec, point(normal(100, 20, 600, 1)), point(normal(100, 20, 600, 2)), 0.95
    )
    assert small is not None and large is not None and large < small
    gp = METRIC_SPECS["goodput"]
    a, b = point(normal(100, 20, 60, 1)), point(normal(100, 20, 60, 2))
    assert min_detectable(gp, _without_good(a), _without_good(b), 0.95) is None
    assert (min_detectable(gp, a, b, 0.95) or 0) > 0


# --------------------------------------------------------------------------- goodput

GOOD_TOLS = "goodput:0.1%,goodput_req:0.1%"


def _without_good(p: SweepPoint) -> SweepPoint:
    """The point as a document written before the good flags were stored holds it."""
    return dataclasses.replace(
        p, samples={k: v for k, v in (p.samples or {}).items() if k != "good"}
    )


def test_goodput_window_rates_count_the_good_requests_only() -> None:
    # TTFTs around the 1000 ms objective: about a third of the requests miss it.
    p = point(normal(900, 250, 300, 3))
    assert p.verdict is not None and p.verdict.good is not None
    assert 0 < p.verdict.good < p.summary.requests
    assert sum(p.samples["good"]) == p.verdict.good  # type: ignore[index, arg-type]
    good, out = window_rates(p, "goodput_tok_s"), window_rates(p, "output_tok_s")
    assert good is not None and out is not None and len(good) == len(out)
    assert (good <= out + 1e-9).all() and good.sum() < out.sum()
    assert good.mean() == pytest.approx(p.summary.goodput_tok_s, rel=0.15)
    reqs = window_rates(p, "goodput_req_s")
    assert reqs is not None and reqs.mean() == pytest.approx(p.summary.goodput_req_s, rel=0.2)
    assert window_rates(_without_good(p), "goodput_tok_s") is None


def test_goodput_of_two_runs_of_one_engine_is_noise() -> None:
    # The same engine twice: the good share differs by chance, within the windows' spread.
    old, new = point(normal(900, 250, 300, 3)), point(normal(900, 250, 300, 4))
    c = regression.compare_points(old, new, GOOD_TOLS)
    for metric in ("goodput", "goodput_req"):
        r = row(c, metric)
        assert r.delta_pct is not None and abs(r.delta_pct) > 0.1  # beyond the tolerance ...
        assert r.status == "noise", (metric, r)  # ... but within the runs' own spread
        assert r.noise is not None and r.noise.method == "windows"
        assert r.mde is not None and r.mde > abs(r.delta or 0.0)
    assert not c.regressed


@pytest.mark.parametrize("shift", [1.1, 1.2])
def test_goodput_that_fell_beyond_its_windows_regresses(shift: float) -> None:
    # The same engine whose first tokens came later: more requests miss the 1000 ms TTFT.
    old = point(normal(900, 250, 300, 3))
    new = point([v * shift for v in normal(900, 250, 300, 4)])
    c = regression.compare_points(old, new, GOOD_TOLS)
    r = row(c, "goodput")
    assert r.delta_pct is not None and r.delta_pct < -20
    assert r.status == "regressed"
    assert r.noise is not None and r.noise.noise is False and (r.noise.p_value or 1) < 0.05
    assert r.mde is not None and r.mde < abs(r.delta or 0.0)
    assert c.regressed


def test_goodput_without_the_good_flags_is_judged_by_the_tolerance_alone() -> None:
    old = _without_good(point(normal(900, 250, 300, 3)))
    new = _without_good(point(normal(900, 250, 300, 4)))
    r = row(regression.compare_points(old, new, GOOD_TOLS), "goodput")
    assert r.noise is not None and r.noise.method == "none" and r.mde is None
    assert r.status in ("regressed", "improved")  # one number per run: the tolerance decides
