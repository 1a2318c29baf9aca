"""An arrival process is one registry entry plus its gaps: a throwaway one, Weibull gaps of
shape k, registered in one entry, runs through the schedule and ``LoadLevel`` (validation,
label, JSON), and leaves nothing behind."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np
import pytest

from pytest_llmslo import arrivals
from pytest_llmslo.arrivals import Arrival, Param
from pytest_llmslo.load.schedule import arrival_offsets_ns, expected_arrivals
from pytest_llmslo.records import LoadLevel


def _weibull_gaps(
    rng: np.random.Generator, n: int, rate: float, p: Mapping[str, float]
) -> np.ndarray:
    k = p["shape"]
    return rng.weibull(k, n) / (rate * math.gamma(1 + 1 / k))


@pytest.fixture
def weibull() -> Iterator[Arrival]:
    entry = arrivals.register(
        Arrival(
            "weibull",
            _weibull_gaps,
            params=(Param("shape", 1.0),),
            spread=lambda mean, p: 6.0 * math.sqrt(mean + 1.0),
            suffix=lambda p: f"w{arrivals.num(p['shape'])}",
        )
    )
    try:
        yield entry
    finally:
        arrivals.unregister("weibull")


@pytest.mark.usefixtures("weibull")
def test_a_registered_process_runs_through_the_schedule_and_the_level() -> None:
    level = LoadLevel.rate(20, "weibull", 3, params={"shape": 2.0})
    assert level.label == "r20w2" and level.params == {"shape": 2.0}
    assert level.to_dict()["arrival_params"] == {"shape": 2.0}
    assert LoadLevel.from_dict(level.to_dict()) == level
    gaps = np.diff(arrival_offsets_ns(level, 20_000)) / 1e9
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.03)
    # Weibull of shape 2: the gaps' coefficient of variation is about 0.52.
    assert gaps.std() / gaps.mean() == pytest.approx(0.523, rel=0.05)
    assert arrival_offsets_ns(level, 50) == arrival_offsets_ns(level, 50)  # seeded
    assert expected_arrivals(level, 10.0) > 200
    # Its default, on a profile's clock.
    ramp = LoadLevel.ramp(10, 30, 10.0, "weibull", 1)
    assert ramp.label == "r10-30w1" and 150 < len(arrival_offsets_ns(ramp, 1000)) < 250
    with pytest.raises(ValueError, match="shape must be > 0"):
        LoadLevel.rate(5, "weibull", params={"shape": -1.0})
    with pytest.raises(ValueError, match="shape applies to weibull arrivals only"):
        LoadLevel.rate(5, "poisson", params={"shape": 2.0})
    with pytest.raises(ValueError, match="has no parameter 'scale'"):
        LoadLevel.rate(5, "weibull", params={"scale": 2.0})


def test_the_throwaway_leaves_nothing_behind(weibull: Arrival) -> None:
    arrivals.unregister(weibull.name)
    assert "weibull" not in arrivals.names()
    with pytest.raises(ValueError, match="a rate level needs arrival"):
        LoadLevel.rate(5, "weibull")
    with pytest.raises(ValueError, match="registered already"):
        arrivals.register(arrivals.get("gamma"))


def test_the_builtin_processes_keep_their_labels_and_keys() -> None:
    assert arrivals.names() == ("poisson", "constant", "gamma")
    gamma = LoadLevel.rate(4, "gamma", burstiness=0.5)
    assert gamma.label == "r4g0.5" and gamma.params == {"burstiness": 0.5}
    assert gamma.to_dict() == {
        "mode": "rate", "value": 4.0, "arrival": "gamma", "seed": 0, "burstiness": 0.5,
    }  # fmt: skip
    assert LoadLevel.rate(4, "constant").to_dict().keys() == {"mode", "value", "arrival", "seed"}
    with pytest.raises(ValueError, match=r"burstiness applies to gamma arrivals only"):
        LoadLevel.rate(4, "poisson", burstiness=0.5)
