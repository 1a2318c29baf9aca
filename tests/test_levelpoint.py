"""A point of a level, and an action run once when the level's measured part passes it."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from pytest_llmslo.levelpoint import AtPoint, LevelPoint, parse_level_point


@dataclass
class P:  # what the load generator reports (load.Progress's fields that matter here)
    done: int
    total: int
    phase: str = "measuring"
    warmup: bool = False


@pytest.mark.parametrize(
    ("text", "point"),
    [
        ("20s", LevelPoint(seconds=20.0)),
        ("1500ms", LevelPoint(seconds=1.5)),
        ("2m", LevelPoint(seconds=120.0)),
        (" 50 % ", LevelPoint(fraction=0.5)),
        (7, LevelPoint(seconds=7.0)),
    ],
)
def test_points_are_read_from_text(text: object, point: LevelPoint) -> None:
    assert parse_level_point(text) == point


@pytest.mark.parametrize("bad", ["soon", "-3s", "100%", "5h"])
def test_a_bad_point_says_what_is_accepted(bad: str) -> None:
    with pytest.raises(ValueError, match=r"a point of a level|share must be|>= 0"):
        parse_level_point(bad)


def test_a_share_is_of_the_requests_or_of_the_duration() -> None:
    half = LevelPoint(fraction=0.5)
    assert not half.reached(49, 100, 30.0) and half.reached(50, 100, 0.0)
    assert half.reached(0, 0, 5.0, duration_s=10.0)
    assert not half.reached(0, 0, 4.9, duration_s=10.0)
    assert not half.reached(0, 0, 100.0)  # neither a count nor a duration: never


def test_the_action_runs_once_on_its_own_thread_past_the_point() -> None:
    seen: list[object] = []
    ran: list[str] = []
    gate = threading.Event()

    def action() -> str:
        ran.append(threading.current_thread().name)
        gate.wait(5)
        return "grown"

    at = AtPoint(LevelPoint(fraction=0.5), action, inner=seen.append, name="grow")
    at(P(0, 4, phase="warm-up", warmup=True))
    at(P(1, 4))
    assert not at.fired
    at(P(2, 4))  # the point: started, and the report returns while the action still runs
    assert at.fired and at.asked_ns is not None and at.done_ns is None
    at(P(3, 4))
    gate.set()
    assert at.wait(5)
    assert ran == ["grow"] and at.result == "grown" and at.error is None
    assert at.done_ns is not None and at.done_ns >= at.asked_ns
    assert len(seen) == 4  # every report still reached the level's own progress


def test_an_action_that_raises_is_kept_not_raised() -> None:
    def boom() -> None:
        raise RuntimeError("no room")

    at = AtPoint(LevelPoint(seconds=0.0), boom)
    at(P(0, 10))
    assert at.wait(5)
    assert isinstance(at.error, RuntimeError)
