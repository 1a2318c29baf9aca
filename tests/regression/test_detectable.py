"""The noise bound of throughput from its per-window rates, and the smallest change each
comparison row could have detected, on runs of known timings."""

from __future__ import annotations

import math

import pytest
from regression_helpers import normal, point, row

from pytest_llmslo import regression
from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.regression.detectable import min_detectable, window_rates, window_se

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
    assert (
        min_detectable(METRIC_SPECS["goodput"], point([1.0] * 50), point([1.0] * 50), 0.95) is None
    )
