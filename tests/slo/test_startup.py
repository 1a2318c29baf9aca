"""Start objectives: ``ready_s < 60`` builds an objective, ``assert_startup`` judges a cold
start and names every objective with its measured seconds."""

from __future__ import annotations

import pytest

from pytest_llmslo import slo
from pytest_llmslo.engines.coldstart import ColdStart
from pytest_llmslo.errors import LoadError, SloViolation
from pytest_llmslo.slo import (
    StartupObjective,
    assert_startup,
    first_token_s,
    port_open_s,
    ready_s,
)
from pytest_llmslo.slo.judging import judging

COLD = ColdStart(
    "process",
    {"spawned_s": 0.01, "port_open_s": 0.4, "ready_s": 1.25, "model_listed_s": 1.26,
     "first_token_s": 2.5},
)  # fmt: skip


def test_a_phase_compared_with_seconds_is_an_objective() -> None:
    o = first_token_s <= 90
    assert o == StartupObjective("first_token_s", "<=", 90.0)
    assert o.label == "first_token_s <= 90 s"
    assert o.holds(90.0) and not o.holds(90.5) and not o.holds(None)
    with pytest.raises(TypeError, match="no truth value"):
        assert ready_s < 3
    with pytest.raises(TypeError, match="number of seconds"):
        _ = ready_s < "3"  # type: ignore[operator]
    with pytest.raises(ValueError, match="unknown start phase"):
        StartupObjective("warm_s", "<", 1.0)


def test_a_cold_start_that_meets_every_objective_passes() -> None:
    verdict = assert_startup(COLD, ready_s < 2, first_token_s < 3)
    assert verdict.passed
    assert [r.observed_s for r in verdict.results] == [1.25, 2.5]
    assert verdict.summary_line() == "start objectives met by the engine (2 of 2)"


def test_a_miss_names_the_objective_and_the_measured_seconds() -> None:
    with pytest.raises(SloViolation) as info:
        assert_startup(COLD.to_dict(), ready_s < 1, first_token_s < 3)
    text = str(info.value)
    assert text.splitlines()[0] == (
        "start objectives missed by the engine: ready_s < 1 s: measured 1.250 s -> FAIL"
    )
    assert "first_token_s < 3 s: measured 2.500 s -> pass" in text
    assert "cold start (process): spawned 0.01 s, port open 0.40 s, ready 1.25 s" in text
    assert info.value.verdict.passed is False  # type: ignore[attr-defined]


def test_a_phase_the_runtime_does_not_have_fails_as_not_measured() -> None:
    pod = ColdStart("kubernetes", {"ready_s": 3.0, "first_token_s": 4.0})
    with pytest.raises(SloViolation, match=r"port_open_s < 1 s: measured n/a \(phase not"):
        assert_startup(pod, port_open_s < 1)


def test_the_current_engine_comes_from_the_judging() -> None:
    with judging() as (open_judging, _):
        open_judging.bind_engine("sim", COLD.to_dict())
        assert assert_startup(ready_s < 2).engine == "sim"
        with pytest.raises(SloViolation, match="missed by engine sim"):
            assert_startup(first_token_s < 1)
    with pytest.raises(LoadError, match="found no current engine"):
        assert_startup(ready_s < 2)


def test_bad_calls_say_how_to_call_it() -> None:
    with pytest.raises(TypeError, match="needs start objectives"):
        assert_startup(COLD)
    with pytest.raises(TypeError, match="engine first"):
        assert_startup(ready_s < 2, COLD)
    with pytest.raises(TypeError, match="takes an engine"):
        assert_startup(42, ready_s < 2)
    assert slo.first_token_s == first_token_s
