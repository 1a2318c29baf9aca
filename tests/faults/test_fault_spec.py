"""What a fault asks (the ``fault`` setting): its kinds, keys and defaults, several at once,
and bad input named with what is accepted."""

from __future__ import annotations

import pytest

from pytest_llmslo.faults import Fault, parse_faults
from pytest_llmslo.levelpoint import LevelPoint


def test_the_text_forms() -> None:
    assert parse_faults("kill at=40%") == (Fault("kill", LevelPoint(fraction=0.4)),)
    (restart,) = parse_faults("restart at=5s,replica=replica1,startup_s=1.5")
    assert restart == Fault("restart", LevelPoint(seconds=5.0), replica="replica1", startup_s=1.5)
    (drop,) = parse_faults("drop at=30%,for=2s,rate=50%")
    assert (drop.for_s, drop.rate) == (2.0, 0.5)
    (delay,) = parse_faults("delay at=3s,for=2s,by=200ms,window=4s,share=80%")
    assert (delay.by_s, delay.for_s, delay.window_s, delay.share) == (0.2, 2.0, 4.0, 0.8)
    assert parse_faults("kind=stall,at=1s,for=500ms")[0].for_s == 0.5


def test_several_faults_a_dict_and_a_list() -> None:
    both = parse_faults("kill at=3s; restart at=8s")
    assert [f.kind for f in both] == ["kill", "restart"]
    assert parse_faults({"kind": "stall", "at": "50%", "for": 2}) == (
        Fault("stall", LevelPoint(fraction=0.5), for_s=2.0),
    )
    assert len(parse_faults([{"kind": "kill", "at": 1}, "stall at=2s,for=1s"])) == 2
    assert parse_faults("off") == () and parse_faults(None) == () and parse_faults("") == ()


def test_labels_say_what_and_when() -> None:
    assert parse_faults("kill at=40%")[0].label == "kill at 40%"
    assert parse_faults("drop at=3s,for=2s")[0].label == "drop at 3s: all connections for 2 s"
    assert parse_faults("delay at=3s,for=2s,by=200ms")[0].label == "delay at 3s: +200 ms for 2 s"
    assert parse_faults("stall at=1s,for=2s,replica=1")[0].label == "stall at 1s for 2 s (1)"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("melt at=3s", "the kind is one of kill, restart, drop, delay, stall, got 'melt'"),
        ("kill", "kill: at= missing"),
        ("kill at=3s,for=2s", "kill takes no for; it takes at, window, share, replica"),
        ("stall at=3s", "a stall lasts a while: give for=<seconds> > 0"),
        ("delay at=3s,for=2s", "a delay adds some latency: give by=<time> > 0"),
        ("drop at=3s,for=2s,rate=0", "rate is the share of connections dropped"),
        ("kill at=soon", "is not a point of a level"),
        ("stall at=1s,for=later", "for='later' is not a time"),
        ("kill at=1s,window=0.5s", "window must be at least 1 s"),
        ("kill at=1s,share=150%", "share must be in (0 %, 100 %]"),
        ("kill at=1s,oops", "'oops' is not key=value"),
    ],
)
def test_bad_faults_say_what_is_wrong(bad: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_faults(bad)
    assert says in str(info.value)
    assert "e.g. 'kill at=40%'" in str(info.value)
