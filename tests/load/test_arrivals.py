"""Arrival processes: gamma burstiness, ramps and steps on absolute times, trace replay
times and the cap on requests in flight, against a server of known timing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pytest_llmslo.errors import LoadError
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.load.schedule import arrival_offsets_ns, expected_arrivals
from pytest_llmslo.metrics.traffic import summarize
from pytest_llmslo.records import LoadLevel


@pytest.mark.parametrize("k", [0.25, 0.5, 1.0, 4.0])
def test_gamma_gaps_have_the_burstiness_cv(k: float) -> None:
    level = LoadLevel.rate(20, "gamma", 3, burstiness=k)
    gaps = np.diff(arrival_offsets_ns(level, 40_000)) / 1e9
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.03)
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / np.sqrt(k), rel=0.05)
    assert arrival_offsets_ns(level, 100) == arrival_offsets_ns(level, 100)  # seeded


def test_ramp_rates_follow_the_line() -> None:
    level = LoadLevel.ramp(10, 50, 20.0, "poisson", 5)
    assert level.label == "r10-50" and level.value == pytest.approx(30.0)
    t = np.array(arrival_offsets_ns(level, 10_000)) / 1e9
    assert t.max() < 20.0  # arrivals past the profile are dropped
    assert len(t) == pytest.approx(600, rel=0.1)  # (10 + 50) / 2 * 20
    counts, _ = np.histogram(t, bins=4, range=(0, 20))
    expected = [5 * (10 + 40 * (i + 0.5) / 4) for i in range(4)]  # 75, 125, 175, 225
    assert counts == pytest.approx(expected, rel=0.25)
    const = np.array(arrival_offsets_ns(LoadLevel.ramp(0, 10, 10.0, "constant"), 1000)) / 1e9
    # Constant arrivals on a ramp from 0: arrival i where 0.5 t^2 = i.
    assert const[:4] == pytest.approx(np.sqrt(2 * np.arange(4)), abs=1e-6)


def test_steps_hold_each_rate() -> None:
    level = LoadLevel.steps([2, 8, 4], 5.0, "constant")
    assert level.label == "r2/8/4" and level.value == pytest.approx(14 / 3)
    t = np.array(arrival_offsets_ns(level, 1000)) / 1e9
    counts, _ = np.histogram(t, bins=3, range=(0, 15))
    assert counts.tolist() == [10, 40, 20]
    assert expected_arrivals(level, None) >= 70
    assert expected_arrivals(level, 5.0) == 11


def test_level_shapes_round_trip_and_scale() -> None:
    for lv in (
        LoadLevel.rate(4, "gamma", 2, burstiness=0.5, max_concurrency=8),
        LoadLevel.ramp(1, 9, 30),
        LoadLevel.steps([1, 2], 10, "constant"),
        LoadLevel.trace(2.5, max_concurrency=16),
    ):
        assert LoadLevel.from_dict(json.loads(json.dumps(lv.to_dict()))) == lv
    assert LoadLevel.rate(4, "gamma", burstiness=0.5, max_concurrency=8).label == "r4g0.5m8"
    assert LoadLevel.trace(2).label == "x2"
    doubled = LoadLevel.ramp(1, 9, 30).scaled(10.0)
    assert doubled.profile == ((30.0, 2.0, 18.0),)
    with pytest.raises(ValueError, match="burstiness applies to gamma"):
        LoadLevel.rate(4, "poisson", burstiness=0.5)
    with pytest.raises(ValueError, match="caps an open loop"):
        LoadLevel("concurrency", 4, "closed", max_concurrency=2)
    with pytest.raises(ValueError, match="> 0"):
        LoadLevel.ramp(0, 0, 10)


def _max_in_flight(run) -> int:  # type: ignore[no-untyped-def]
    events = sorted(
        [(r.sent_ns, 1) for r in run.records] + [(r.end_ns, -1) for r in run.records],
        key=lambda e: (e[0], e[1]),
    )
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def test_the_cap_is_honoured_and_its_waits_reported(fixed_url: str) -> None:
    client = ClientSettings(base_url=fixed_url, model="m")
    wl = WorkloadSpec(isl=8, osl=20, calibrate=False)
    # 40 req/s of requests that last ~0.25 s: ~10 in flight uncapped, 3 with the cap.
    level = LoadLevel.rate(40, "constant", max_concurrency=3)
    run = run_load_sync(LoadJob(client, wl, level, requests=40, warmup=0))
    assert all(r.ok for r in run.records)
    assert _max_in_flight(run) <= 3
    cap = run.meta["traffic"]["cap"]
    assert cap["max_concurrency"] == 3 and cap["delayed"] > 20 and cap["wait_max_ms"] > 100
    # The cap's waits are not the client's lag: the run stays valid.
    assert run.health.valid, run.health.reasons
    t = summarize(run)
    assert t is not None and t["offered_req_s"] == pytest.approx(40, rel=0.01)
    assert t["sent_req_s"] < 20


def test_trace_replay_sends_on_the_traces_times(fixed_url: str, tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    times = [0, 100, 100, 400, 1000, 1300]
    p.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 16, "output_length": 3}) + "\n"
            for t in times
        )
    )
    client = ClientSettings(base_url=fixed_url, model="m")
    wl = WorkloadSpec(kind="trace", path=str(p), calibrate=False)
    run = run_load_sync(LoadJob(client, wl, LoadLevel.trace(2.0), requests=None, warmup=0))
    assert len(run.records) == 6 and all(r.ok for r in run.records)
    sched = np.array([r.scheduled_ns for r in sorted(run.records, key=lambda r: r.index)])
    assert ((sched - sched[0]) / 1e6).tolist() == pytest.approx([t / 2 for t in times], abs=0.01)
    sent = np.array([r.sent_ns - r.scheduled_ns for r in run.records]) / 1e6
    assert sent.max() < 20  # late sends are measured (schedule lag), none large here
    t = summarize(run)
    assert t is not None and t["trace"]["requests"] == 6
    assert t["offered_req_s"] == pytest.approx(5 / 0.65)
    # A trace level needs a trace workload.
    with pytest.raises(LoadError, match="replays a trace workload"):
        run_load_sync(LoadJob(client, WorkloadSpec(isl=4, osl=2), LoadLevel.trace(1), requests=2))


def test_a_profile_shorter_than_the_warmup_is_refused(fixed_url: str) -> None:
    client = ClientSettings(base_url=fixed_url, model="m")
    level = LoadLevel.steps([2], 1.0, "constant")
    with pytest.raises(LoadError, match="not more than the 5 of the warm-up"):
        run_load_sync(LoadJob(client, WorkloadSpec(isl=4, osl=2), level, requests=None, warmup=5,
                      duration_s=10))  # fmt: skip
