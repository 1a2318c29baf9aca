"""One point against its baseline: regressed, improved, within tolerance, noise or n/a by
the rule; what makes two points not comparable; the table, the error and the properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from regression_helpers import normal, point, row

from pytest_llmslo import regression, slo
from pytest_llmslo.errors import RegressionError
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.regression import tolerances


def test_regressed_latency_beyond_tolerance_and_noise():
    old = point(normal(200, 20, 400, 1))
    new = point(normal(260, 20, 400, 2))
    c = regression.compare_points(old, new, "ttft_p50:10%")
    r = row(c, "ttft_p50")
    assert r.status == "regressed"
    assert r.old == pytest.approx(old.summary.metric("ttft", 50))
    assert r.new == pytest.approx(new.summary.metric("ttft", 50))
    assert r.delta == pytest.approx(r.new - r.old)
    assert r.delta_pct == pytest.approx(100 * (r.new - r.old) / r.old)
    assert r.noise is not None and r.noise.noise is False
    assert r.noise.method == "order-statistic"
    assert r.noise.p_value < 1e-10
    assert c.regressed and c.status == "regressed"


def test_improved_latency():
    old = point(normal(260, 20, 400, 3))
    new = point(normal(200, 20, 400, 4))
    c = regression.compare_points(old, new, "ttft_p50:10%")
    assert row(c, "ttft_p50").status == "improved"
    assert not c.regressed and c.improved and c.status == "improved"


def test_within_tolerance():
    old = point(normal(200, 20, 400, 5))
    new = point(normal(205, 20, 400, 6))
    c = regression.compare_points(old, new, "ttft_p50:10%,ttft_p99:50ms")
    assert row(c, "ttft_p50").status == "within tolerance"
    assert row(c, "ttft_p99").status == "within tolerance"
    assert row(c, "ttft_p50").noise is None  # only judged beyond the tolerance
    assert c.status == "unchanged"


def test_beyond_tolerance_but_within_noise_is_noise_not_a_failure():
    # 60 requests: a P99 cannot be bounded from above, so no rise of it can be shown.
    old = point(normal(200, 40, 60, 7))
    new = point([v * 1.3 for v in normal(200, 40, 60, 8)])
    c = regression.compare_points(old, new, "ttft_p99:10%")
    r = row(c, "ttft_p99")
    assert r.delta_pct is not None and r.delta_pct > 10
    assert r.status == "noise"
    assert r.noise is not None and r.noise.noise is True
    assert "samples a side" in r.noise.note
    assert not c.regressed
    text = c.format()
    assert "ttft_p99" in text and "within noise" in text


def test_noisy_median_is_noise():
    # A wide distribution and few requests: a 15 % higher median is not distinguishable.
    old = point(normal(200, 120, 30, 9))
    new = point([v * 1.15 for v in normal(200, 120, 30, 10)])
    c = regression.compare_points(old, new, "ttft_p50:5%")
    assert row(c, "ttft_p50").status == "noise"


def test_mean_uses_a_seeded_bootstrap():
    old = point(normal(200, 20, 300, 11))
    new = point(normal(240, 20, 300, 12))
    a = regression.compare_points(old, new, "ttft_mean:5%")
    b = regression.compare_points(old, new, "ttft_mean:5%")
    r = row(a, "ttft_mean")
    assert r.status == "regressed"
    assert r.noise is not None and r.noise.method == "bootstrap"
    assert r.noise.low > 0
    assert (r.noise.low, r.noise.high) == (
        row(b, "ttft_mean").noise.low,
        row(b, "ttft_mean").noise.high,
    )


def test_without_samples_the_tolerance_decides():
    old = point(normal(200, 40, 60, 7), samples=False)
    new = point([v * 1.3 for v in normal(200, 40, 60, 8)], samples=False)
    c = regression.compare_points(old, new, "ttft_p99:10%")
    r = row(c, "ttft_p99")
    assert r.status == "regressed"
    assert r.noise is not None and r.noise.noise is None


def test_goodput_regression_is_judged_by_its_windows():
    ttfts = [100.0] * 100
    old = point(ttfts)
    new = point(ttfts, duration_scale=1.25)  # same requests over a longer window
    c = regression.compare_points(old, new, "goodput:5%,throughput:30%")
    g = row(c, "goodput")
    assert g.status == "regressed"
    assert g.new == pytest.approx(g.old / 1.25, rel=1e-6)
    assert g.noise is not None and g.noise.method == "windows" and g.noise.noise is False
    assert row(c, "throughput").status == "within tolerance"
    # Higher-is-better: the same change the other way is an improvement.
    back = regression.compare_points(new, old, "goodput:5%")
    assert row(back, "goodput").status == "improved"


def test_absolute_tolerance():
    ttfts = [100.0] * 100
    old, new = point(ttfts), point(ttfts, duration_scale=1.25)
    loss = row(regression.compare_points(old, new, "goodput:5%"), "goodput")
    allowed = -loss.delta + 1.0
    c = regression.compare_points(old, new, f"goodput:{allowed}tok/s")
    assert row(c, "goodput").status == "within tolerance"


def test_attainment_judged_by_a_proportion_test():
    ttfts = [100.0] * 200
    old = point(ttfts, failed=4)  # 98 % good
    new = point(ttfts, failed=10)  # 95 % good: -3 pp, beyond 1 pp, p ~ 0.11
    c = regression.compare_points(old, new, "attainment:1pp")
    r = row(c, "attainment")
    assert r.delta == pytest.approx(-0.03)
    assert r.status == "noise"
    assert r.noise is not None and r.noise.method == "two-proportion"
    worse = point(ttfts, failed=60)  # 70 % good
    c2 = regression.compare_points(old, worse, "attainment:1pp")
    assert row(c2, "attainment").status == "regressed"


def test_missing_value_is_na_and_never_fails():
    old = point([100.0] * 50, objectives=None)
    new = point([100.0] * 50, objectives=None)
    c = regression.compare_points(old, new, "goodput:5%,ttft_p50:10%")
    assert row(c, "goodput").status == "n/a"
    assert row(c, "ttft_p50").status == "within tolerance"
    assert not c.regressed
    assert "no value on one side" in c.format()


def test_default_tolerances_when_none_given():
    old, new = point([100.0] * 50), point([100.0] * 50)
    c = regression.compare_points(old, new)
    assert [r.metric for r in c.rows] == list(
        tolerances.parse_tolerances(tolerances.DEFAULT_TOLERANCES)
    )
    c2 = regression.compare_points(old, new, {})
    assert len(c2.rows) == len(c.rows)


def test_exact_tolerance_is_within():
    old = point([100.0] * 50, samples=False)
    new = point([110.0] * 50, samples=False)
    c = regression.compare_points(old, new, "ttft_p50:10ms")
    assert row(c, "ttft_p50").status == "within tolerance"


def test_few_samples_are_judged_too():
    # 12 requests (a tiny CI session): a 2 % change of the median or the mean is noise.
    old = point(normal(200, 20, 12, 31))
    new = point([v * 1.02 for v in normal(200, 20, 12, 31)])
    c = regression.compare_points(old, new, "ttft_p50:0.1%,ttft_mean:0.1%")
    p50, mean = row(c, "ttft_p50"), row(c, "ttft_mean")
    assert p50.status == "noise" and p50.noise.method == "order-statistic"
    assert mean.status == "noise" and mean.noise.method == "rank-test"
    assert "rank test p=" in c.format()
    # A large shift is shown even with 12 samples.
    far = point([v * 3 for v in normal(200, 20, 12, 32)])
    c2 = regression.compare_points(old, far, "ttft_p50:10%,ttft_mean:10%")
    assert row(c2, "ttft_p50").status == "regressed"
    assert row(c2, "ttft_mean").status == "regressed"


def test_different_levels_are_not_compared():
    old = point([100.0] * 50, level=LoadLevel.concurrency(8))
    new = point([200.0] * 50, level=LoadLevel.concurrency(16))
    c = regression.compare_points(old, new, "ttft_p50:10%")
    assert not c.comparable and not c.regressed and c.rows == ()
    assert "load level: c8 (baseline) != c16 (new)" in c.problems
    assert "NOT COMPARABLE" in c.format()


def test_different_objectives_are_not_compared():
    old = point([100.0] * 50)
    new = point([100.0] * 50, objectives=(slo.Objective("ttft", 99, "<", 200.0),))
    c = regression.compare_points(old, new, "goodput:5%")
    assert not c.comparable
    assert c.problems[0].startswith("slo: ")


def test_invalid_client_run_is_not_compared():
    old = point([100.0] * 50)
    new = point([300.0] * 50)
    reasons = ("schedule lag p99 48 ms > 10 ms",)
    new = replace(new, summary=replace(new.summary, valid=False, invalid_reasons=reasons))
    c = regression.compare_points(old, new, "ttft_p50:10%")
    assert not c.comparable and not c.regressed
    assert "the new run is invalid" in c.problems[0]
    assert "schedule lag" in c.problems[0]


def test_interrupted_points_are_not_compared():
    p = point([100.0] * 30)
    cut = replace(p, interrupted=True)
    c = regression.compare_points(p, cut, "ttft_p50:10%")
    assert not c.comparable
    assert c.problems == ("the new run was interrupted before its load finished",)


def test_format_has_old_and_new_for_an_assertion_message():
    old = point(normal(200, 20, 400, 1))
    new = point(normal(260, 20, 400, 2))
    c = regression.compare_points(
        old, new, "ttft_p50:10%,itl_p50:2ms", versions=("0.9.2", "0.10.0")
    )
    text = c.format()
    lines = text.splitlines()
    assert lines[0] == "vllm | test_chat | c8: REGRESSED vs baseline (engine 0.9.2 -> 0.10.0)"
    assert "baseline" in lines[1] and "new" in lines[1] and "tolerance" in lines[1]
    assert f"{row(c, 'ttft_p50').old:.1f} ms" in text
    assert f"{row(c, 'ttft_p50').new:.1f} ms" in text
    assert "REGRESSED" in text and "within tolerance" in text
    assert "beyond the tolerance 10%" in text
    assert "rule:" in text
    with pytest.raises(RegressionError) as exc:
        regression.assert_no_regression(c)
    assert isinstance(exc.value, AssertionError)
    assert str(exc.value) == text
    assert exc.value.verdict is c


def test_no_regression_does_not_raise():
    p = point([100.0] * 50)
    regression.assert_no_regression(regression.compare_points(p, p))


def test_properties_and_to_dict():
    old = point(normal(200, 20, 400, 1))
    new = point(normal(260, 20, 400, 2))
    c = regression.compare_points(old, new, "ttft_p50:10%")
    props = dict(c.properties())
    assert props["llmslo.compare.status"] == "regressed"
    assert props["llmslo.compare.ttft_p50.status"] == "regressed"
    assert float(props["llmslo.compare.ttft_p50.old"]) == pytest.approx(
        row(c, "ttft_p50").old, rel=1e-5
    )
    d = c.to_dict()
    assert d["rows"][0]["noise"]["method"] == "order-statistic"
    assert d["level"]["value"] == 8.0


def test_properties_leave_out_undefined_values():
    p = point([100.0] * 30)
    q = replace(p, verdict=None, summary=replace(p.summary, goodput_tok_s=None))
    c = regression.compare_points(p, q, "goodput:5%")
    props = dict(c.properties())
    assert props["llmslo.compare.goodput.status"] == "n/a"
    assert "llmslo.compare.goodput.new" in props or "llmslo.compare.goodput.old" in props
    assert all(v != "" for v in props.values())
