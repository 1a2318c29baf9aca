"""The SLO DSL: symbols, objectives and their text form."""

from __future__ import annotations

import json

import pytest

from pytest_llmslo import slo
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.slo import (
    Objective,
    e2e_p99,
    itl,
    itl_mean,
    itl_p50,
    parse_objectives,
    tpot_p90,
    ttft,
    ttft_p99,
    ttft_p999,
)


def test_symbols_build_objectives() -> None:
    o = ttft_p99 < 500
    assert o == Objective("ttft", 99.0, "<", 500.0)
    assert (ttft.p99 < 500) == o
    assert (ttft.p(99) < 500) == o
    assert (500 > ttft_p99) == o  # reflected comparison
    assert (itl.p50 <= 30).op == "<="
    assert (itl_mean >= 2).stat == "mean"
    assert (ttft_p999 < 900).stat == 99.9
    assert slo.e2e_mean.metric == "e2e"
    assert slo.ttfot_p95.stat == 95.0


def test_labels() -> None:
    assert (ttft_p99 < 500).label == "ttft_p99 < 500 ms"
    assert (ttft_p999 < 1.5).label == "ttft_p999 < 1.5 ms"
    assert (itl_mean <= 30).label == "itl_mean <= 30 ms"
    assert str(tpot_p90 > 2) == "tpot_p90 > 2 ms"


def test_bare_assert_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"assert ttft_p99 < 500.*cannot be evaluated"):
        assert ttft_p99 < 500
    with pytest.raises(TypeError, match="assert_goodput"):
        bool(itl_p50 < 30)
    with pytest.raises(TypeError, match="assert_slo"):
        if e2e_p99 < 1:
            pass


def test_metric_without_stat_and_bad_threshold() -> None:
    with pytest.raises(TypeError, match=r"ttft\.p99"):
        ttft < 500  # noqa: B015
    with pytest.raises(TypeError, match="number of milliseconds"):
        ttft_p99 < "500"  # noqa: B015
    with pytest.raises(ValueError):
        Objective("latency", 99.0, "<", 1)
    with pytest.raises(ValueError):
        Objective("ttft", 99.0, "==", 1)


def test_objective_round_trip() -> None:
    o = itl.p(99.5) <= 12.5
    assert Objective.from_dict(json.loads(json.dumps(o.to_dict()))) == o
    assert o.label == "itl_p995 <= 12.5 ms"


def test_parse_objectives_forms() -> None:
    got = parse_objectives("ttft_p99<500,itl_p50<30")
    assert got == (ttft_p99 < 500, itl_p50 < 30)
    assert parse_objectives("ttft.p99 < 500ms") == (ttft_p99 < 500,)
    assert parse_objectives("ttft.p99 < 0.5s; e2e_p999 <= 20 s\nitl_mean>=1us") == (
        ttft_p99 < 500,
        slo.e2e_p999 <= 20000,
        itl_mean >= 0.001,
    )
    assert parse_objectives(["tpot_p90<20", "ttft_p99.5<700"]) == (
        tpot_p90 < 20,
        ttft.p(99.5) < 700,
    )
    assert parse_objectives("TTFT_P99 < 5e2") == (ttft_p99 < 500,)
    assert parse_objectives("") == ()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("latency_p99<500", "unknown metric 'latency'"),
        ("ttft_p42x<500", "cannot parse"),
        ("ttft_q99<500", "unknown statistic 'q99'"),
        ("ttft<500", "needs a statistic"),
        ("ttft_p99=500", "cannot parse"),
        ("ttft_p99<fast", "cannot parse"),
        ("ttft_p99<500,itl_p50", "'itl_p50'"),
        ("ttft_p100<500", "unknown statistic 'p100'"),
    ],
)
def test_parse_objectives_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_objectives(text, source="--slo")
    msg = str(info.value)
    assert needle in msg
    assert "(from --slo)" in msg
    assert "valid metrics: ttft, ttfot, itl, tpot, e2e" in msg
    assert "p50, p90, p95, p99, p999, mean" in msg
