"""Regression tolerances: parsed per metric, relative or absolute, with their errors."""

from __future__ import annotations

import pytest

from pytest_llmslo.errors import ConfigError
from pytest_llmslo.regression import tolerances


def test_parse_tolerances_relative_and_absolute():
    tols = tolerances.parse_tolerances("goodput:5%,ttft_p99:10%,itl_p50:2ms")
    assert list(tols) == ["goodput", "ttft_p99", "itl_p50"]
    assert tols["goodput"] == tolerances.Tolerance("goodput", 5.0, True)
    assert tols["ttft_p99"].relative and tols["ttft_p99"].amount == 10.0
    assert tols["itl_p50"] == tolerances.Tolerance("itl_p50", 2.0, False)
    assert tols["goodput"].higher_is_better
    assert not tols["ttft_p99"].higher_is_better


def test_parse_tolerances_units_aliases_and_separators():
    tols = tolerances.parse_tolerances(
        "ttft.p99: 0.05s; tpot_p50=500us, throughput:100tok/s, attainment:2pp, "
        "goodput_tok_s:3%, e2e_p99.9:1%, req_s:0.5req/s, error_rate:1pp"
    )
    assert tols["ttft_p99"].amount == pytest.approx(50.0)
    assert tols["tpot_p50"].amount == pytest.approx(0.5)
    assert tols["throughput"] == tolerances.Tolerance("throughput", 100.0, False)
    assert tols["attainment"].amount == pytest.approx(0.02)
    assert tols["attainment"].label == "2 pp"
    assert "goodput" in tols and "e2e_p999" in tols
    assert tols["req_s"].label == "0.5 req/s"
    assert not tols["error_rate"].higher_is_better


def test_parse_tolerances_empty_means_defaults():
    assert tolerances.parse_tolerances("") == {}
    assert tolerances.parse_tolerances(None) == {}
    assert tolerances.parse_tolerances(" , ") == {}
    defaults = tolerances.parse_tolerances(tolerances.DEFAULT_TOLERANCES)
    assert {"goodput", "ttft_p99", "itl_p50"} <= set(defaults)


@pytest.mark.parametrize(
    "text, match",
    [
        ("goodput", r"'goodput'.*METRIC:VALUE.*Valid metrics: goodput"),
        ("latency:5%", r"Unknown metric 'latency'.*Valid metrics:.*ttft"),
        ("ttft_p75:5%", r"Unknown metric 'ttft_p75'"),
        ("goodput:5ms", r"does not fit goodput.*%, tok/s"),
        ("ttft_p99:5", r"'ttft_p99:5' has a unit.*%, ms, s, us"),
        ("ttft_p99:-5%", r"'ttft_p99:-5%'"),
        ("ttft_p99:fast", r"value 'fast'"),
        ("goodput:5%,goodput:3%", r"goodput given twice"),
        ("attainment:2tok/s", r"does not fit attainment.*pp"),
    ],
)
def test_parse_tolerances_errors_name_the_part(text, match):
    with pytest.raises(ConfigError, match=match):
        tolerances.parse_tolerances(text)


def test_tolerance_allowed():
    assert tolerances.Tolerance("ttft_p99", 10.0, True).allowed(200.0) == pytest.approx(20.0)
    assert tolerances.Tolerance("ttft_p99", 3.0, False).allowed(200.0) == 3.0
    assert tolerances.Tolerance("goodput", 5.0, True).label == "5%"
    assert tolerances.Tolerance("itl_p50", 2.0, False).label == "2 ms"
