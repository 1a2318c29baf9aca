"""The load asked is the load measured: a level whose client applied less load than asked
(fewer requests in flight, a lower arrival rate) is invalid, whatever the cause."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_llmslo.load.health import HealthThresholds, applied_load, assess
from pytest_llmslo.records import RequestRecord

MS = 1_000_000


@dataclass
class W:
    """What a worker hands over (``drive.WorkerResult``'s fields that health reads)."""

    records: list[RequestRecord]
    slots: int = 1
    closed: bool = True
    side_flight: list[tuple[int, int]] = field(default_factory=list)
    multi_turn: bool = False
    loop_lag_ns: list[int] = field(default_factory=list)
    stalls: list[tuple[int, int]] = field(default_factory=list)
    cpu_s: float = 0.1
    wall_s: float = 10.0
    t0_ns: int = 0
    kernel_stamps: bool = True

    @property
    def schedule_lag_ns(self) -> list[int]:
        return [r.sent_ns - r.scheduled_ns for r in self.records]


def slot_requests(
    start: int, n: int, busy_ms: float, turnaround_ms: float, *, first: int = 0, status: int = 200
) -> list[RequestRecord]:
    """One closed-loop slot's requests: each due when the one before it ended, sent
    ``turnaround_ms`` later, ``busy_ms`` long."""
    out, due = [], start
    for i in range(n):
        sent = due + round(turnaround_ms * MS) if i else start
        end = sent + round(busy_ms * MS)
        out.append(RequestRecord(first + i, due, sent, end, status=status))
        due = end
    return out


def test_a_client_slow_at_every_turn_applies_less_load_than_asked() -> None:
    # Two slots of 40 ms requests, each next one sent 8 ms after the last ended: every lag
    # is under the 10 ms threshold (so the turnaround rule passes it), yet the engine had
    # 2 x 40 / 48 = 1.67 requests in flight, not 2: a failing level could pass.
    recs = slot_requests(0, 50, 40, 8) + slot_requests(0, 50, 40, 8, first=50)
    h = assess([W(recs, slots=2)], HealthThresholds(), 1)
    assert not h.valid
    assert (h.load_kind, h.load_asked) == ("in_flight", 2)
    assert h.load_achieved == pytest.approx(2 * 40 / 48, rel=0.01)
    assert len(h.reasons) == 1, h.reasons
    assert h.reasons[0].startswith(
        "the closed loop kept 1.7 requests in flight on average over its measured window, "
        "84% of the 2 asked (< 90%, --client-min-load)"
    )
    assert h.to_dict()["load_share"] == pytest.approx(h.load_share)
    # The same requests sent 1 ms after: 98 % of the load, valid.
    fine = slot_requests(0, 50, 40, 1) + slot_requests(0, 50, 40, 1, first=50)
    assert assess([W(fine, slots=2)], HealthThresholds(), 1).valid
    # 0 turns the check off; a closed loop of conversations thinks between turns by design.
    assert assess([W(recs, slots=2)], HealthThresholds(min_load_share=0), 1).valid
    assert assess([W(recs, slots=2, multi_turn=True)], HealthThresholds(), 1).valid


def test_warm_up_and_cool_down_requests_are_load_too() -> None:
    # Slot A runs measured requests back to back from t=0; slot B is still in its warm-up
    # request until t=1000 ms, then runs measured ones; at the end A cools down with an
    # unmeasured request until B's last measured one ends.
    a = slot_requests(0, 20, 100, 0)  # 0 .. 2000 ms
    b = slot_requests(1000 * MS, 12, 100, 0, first=20)  # 1000 .. 2200 ms
    side = [(-500 * MS, 1000 * MS), (2000 * MS, 2200 * MS)]
    load = applied_load([W(a + b, slots=2, side_flight=side)])
    assert load is not None and load.share == pytest.approx(1.0)
    without = applied_load([W(a + b, slots=2)])
    assert without is not None and without.share == pytest.approx((2000 + 1200) / 2200 / 2)


def test_the_turnaround_after_a_failed_request_is_not_the_clients() -> None:
    # Requests that fail at once (50 us) with a 0.5 ms turnaround: the slot is idle 90 % of
    # the time because the engine failed them, not because the client was slow.
    recs = slot_requests(0, 50, 0.05, 0.5, status=503)
    load = applied_load([W(recs)])
    assert load is not None and load.share == pytest.approx(1.0)


def test_an_open_loop_that_falls_behind_its_schedule_sends_a_lower_rate() -> None:
    # Scheduled every 10 ms (100/s), sent every 12 ms: the rate sent is 83/s. With the
    # lag threshold raised out of the way, the load rule alone sees it.
    recs = [RequestRecord(i, i * 10 * MS, i * 12 * MS, i * 12 * MS + 5 * MS) for i in range(101)]
    th = HealthThresholds(max_schedule_lag_p99_ms=10_000)
    h = assess([W(recs, closed=False)], th, 1)
    assert not h.valid and h.load_kind == "arrival_rate"
    assert (h.load_asked, h.load_achieved) == (pytest.approx(100), pytest.approx(100 / 1.2))
    assert h.reasons[0].startswith(
        "the open loop sent 83.3 requests/s where its schedule asked 100 (83%)"
    )
    on_time = [
        RequestRecord(i, i * 10 * MS, i * 10 * MS + MS, i * 10 * MS + 5 * MS) for i in range(101)
    ]
    assert assess([W(on_time, closed=False)], th, 1).valid
