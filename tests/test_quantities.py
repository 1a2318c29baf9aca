"""Quantities as a person types them (``quantities``), and the settings that take them."""

from __future__ import annotations

import pytest

from pytest_llmslo import quantities
from pytest_llmslo.settings import SPEC_BY_NAME


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1h 30m 10s", 5410.0),
        ("2min", 120.0),
        ("1d", 86400.0),
        ("0", 0.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert quantities.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "m5", "1h30", "-3s", "nan", "1e400s", "9" * 80])
def test_bad_durations_name_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration.*5m, 1h30m"):
        quantities.parse_duration(text)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("2.5", 2.5), ("2.5/s", 2.5), ("150/m", 2.5), ("150/min", 2.5), ("900/h", 0.25), ("3rps", 3)],
)
def test_rates(text: str, rate: float) -> None:
    assert quantities.parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize("text", ["2.5/d", "fast", "/s", "-1/s"])
def test_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        quantities.parse_rate(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("2k", 2000),
        ("2K", 2000),
        ("4Ki", 4096),
        ("1Mi", 1024**2),
        ("1.5M", 1_500_000),
        ("2k tokens", 2000),
        ("1 token", 1),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert quantities.parse_size(text) == size


@pytest.mark.parametrize("text", ["1.5", "1.0005k", "4KB", "2 bytes", "k"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        quantities.parse_size(text)


@pytest.mark.parametrize(("text", "q"), [("p99", 99.0), ("P99.9", 99.9), ("99.9", 99.9)])
def test_percentiles(text: str, q: float) -> None:
    assert quantities.parse_percentile(text) == q


@pytest.mark.parametrize("text", ["p100", "p0", "px", "q99"])
def test_bad_percentiles(text: str) -> None:
    with pytest.raises(ValueError, match="percentile"):
        quantities.parse_percentile(text)


def test_settings_take_units() -> None:
    assert SPEC_BY_NAME["duration"].parse("1m") == 60.0
    assert SPEC_BY_NAME["duration"].parse("2s") == 2.0
    assert SPEC_BY_NAME["duration"].parse("0") is None
    assert SPEC_BY_NAME["request_timeout"].parse("10m") == 600.0
    assert SPEC_BY_NAME["think_time"].parse("500ms") == 0.5
    assert SPEC_BY_NAME["rate"].parse("2.5/s,150/m") == (2.5, 2.5)
    assert SPEC_BY_NAME["isl"].parse("4Ki") == 4096
    assert SPEC_BY_NAME["osl"].parse("2k tokens") == 2000
    assert SPEC_BY_NAME["warmup"].parse("1k") == 1000
    # A load is not a duration: 5m is no concurrency.
    with pytest.raises(ValueError):
        SPEC_BY_NAME["capacity_max"].parse("5m")
    with pytest.raises(ValueError, match="Must be > 0"):
        SPEC_BY_NAME["request_timeout"].parse("0s")
    with pytest.raises(ValueError, match=">= 0"):
        SPEC_BY_NAME["seed"].parse("-1")


def test_a_misspelt_metric_gets_a_suggestion() -> None:
    from pytest_llmslo.errors import ConfigError
    from pytest_llmslo.slo import parse_objectives

    with pytest.raises(ConfigError, match="did you mean 'ttft'"):
        parse_objectives("ttf_p99<500")
    (obj,) = parse_objectives("ttft_p99.9<500")
    assert obj.stat == 99.9
