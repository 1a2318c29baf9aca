"""Verdicts that hold on long runs: a stall of the client's loop is caught even when a P99
of loop lag misses it, prompts are built lazily and reproducibly, a level can be bounded by
time alone, decoding past its budget runs in bounded slices, and a level can stop early
once its verdict is settled."""

from __future__ import annotations

import time

import pytest

from pytest_llmslo import metrics, slo
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load, run_load_sync
from pytest_llmslo.load.backlog import Backlog
from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.health import HealthThresholds, stalled_tokens
from pytest_llmslo.load.jobsource import Job, JobSource, JobSpec
from pytest_llmslo.load.workload import PromptSource, build_prompts
from pytest_llmslo.records import LoadLevel, RequestRecord


@pytest.mark.parametrize("stamps", ["auto", "read"])
async def test_a_one_second_block_of_the_loop_makes_the_run_invalid(
    fixed_url: str, stamps: str
) -> None:
    # One block of the event loop: the loop-lag P99 over 10 ms ticks does not move, but
    # the tokens timestamped right after it carry the block (read stamps), or arrived
    # during it and came back in one read with later ones (kernel stamps).
    blocked: list[bool] = []

    def progress(p: object) -> None:
        if getattr(p, "done", 0) >= 10 and not blocked:
            blocked.append(True)
            time.sleep(1.0)  # the progress callback runs on the load's event loop

    client = ClientSettings(fixed_url, "fixed", processes=1, receive_stamps=stamps)  # type: ignore[arg-type]
    th = HealthThresholds(max_loop_lag_p99_ms=50.0, max_idle_share=1.0)
    run = await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=20, calibrate=False),
                         LoadLevel.concurrency(8), requests=60, warmup=0, progress=progress,
                         thresholds=th))  # fmt: skip
    assert blocked
    h = run.health
    assert not h.valid and h.stalls >= 1 and h.stalled_tokens > 0
    (reason,) = [r for r in h.reasons if "stalled" in r]
    assert "longest" in reason and "ms at" in reason and "tokens" in reason
    assert h.loop_lag_max_ms >= 900


def test_stalled_tokens_counts_timestamps_inside_windows() -> None:
    recs = [RequestRecord(0, 0, 0, 100, chunk_ns=[5, 15, 25, 35]),
            RequestRecord(1, 0, 0, 100, chunk_ns=[16, 40])]  # fmt: skip
    assert stalled_tokens(recs, [(10, 20)]) == 2  # 15 and 16
    assert stalled_tokens(recs, [(10, 20), (30, 40)]) == 4  # 35, 40 too (ends included)
    assert stalled_tokens(recs, []) == 0


def test_with_kernel_stamps_only_tokens_behind_a_later_chunk_count() -> None:
    # Kernel stamps date a chunk that arrived alone however late it was read; chunks that
    # came back in one read with later ones share its stamp, and only those can be wrong.
    recs = [RequestRecord(0, 0, 0, 100, chunk_ns=[5, 15, 18, 18, 18, 35]),
            RequestRecord(1, 0, 0, 100, chunk_ns=[16, 16, 40])]  # fmt: skip
    assert stalled_tokens(recs, [(10, 20)], kernel_stamps=True) == 3  # 18, 18 and 16
    assert stalled_tokens(recs, [(10, 20)]) == 6  # read stamps: every one in the window
    assert stalled_tokens(recs, [(30, 40)], kernel_stamps=True) == 0


def test_a_closed_loop_whose_slots_wait_for_the_client_is_invalid() -> None:
    from dataclasses import dataclass, field

    from pytest_llmslo.load.health import assess

    @dataclass
    class W:
        records: list[RequestRecord]
        schedule_lag_ns: list[int]
        loop_lag_ns: list[int] = field(default_factory=list)
        stalls: list[tuple[int, int]] = field(default_factory=list)
        cpu_s: float = 0.1
        wall_s: float = 1.0
        t0_ns: int = 0
        kernel_stamps: bool = True
        closed: bool = True
        slots: int = 1
        multi_turn: bool = False
        side_flight: list[tuple[int, int]] = field(default_factory=list)

    # Requests of 1 s, each sent 20 ms after the one before it ended: 2 % idle.
    recs = [RequestRecord(i, 0, i * 1_020_000_000, i * 1_020_000_000 + 10**9) for i in range(50)]
    lags = [20_000_000] * 50
    h = assess([W(recs, lags)], HealthThresholds(), 1)
    assert not h.valid and h.idle_share == pytest.approx(20 / 1020)
    assert "stood idle 2.0% of the time" in h.reasons[0]
    assert "turnaround P99 20.0 ms > 10 ms" in h.reasons[0]
    assert assess([W(recs, [5_000_000] * 50)], HealthThresholds(), 1).valid  # 0.5 %
    # A turnaround under the lag threshold is the client's ordinary cost, even when the
    # requests are so short (failures at once) that it is a large share of the time.
    # (A closed loop's request is due when the one before it on its slot ended.)
    short = [
        RequestRecord(i, (i - 1) * 10**6 + 50_000 if i else 0, i * 10**6, i * 10**6 + 50_000)
        for i in range(50)
    ]
    assert assess([W(short, [500_000] * 50)], HealthThresholds(), 1).valid
    # An open loop is judged by its schedule lag P99, not by idle slots.
    assert not assess([W(recs, lags, closed=False)], HealthThresholds(), 1).valid
    assert assess([W(recs, [5_000_000] * 50, closed=False)], HealthThresholds(), 1).valid
    # With kernel stamps a late loop alone does not invalidate; with read stamps it does.
    slow = [20_000_000] * 200
    assert assess([W(recs, [0] * 50, loop_lag_ns=slow)], HealthThresholds(), 1).valid
    read = assess([W(recs, [0] * 50, loop_lag_ns=slow, kernel_stamps=False)], HealthThresholds(), 1)
    assert not read.valid and "event-loop lag P99 20.0 ms" in read.reasons[0]


def test_prompts_are_built_lazily_and_the_same_for_the_same_seed() -> None:
    spec = WorkloadSpec(isl=40, osl=7, isl_stddev=8, seed=3)
    a, b = PromptSource(spec), PromptSource(spec)
    forward = [a.prompt(i) for i in range(12)]
    backward = [b.prompt(i) for i in reversed(range(12))][::-1]
    assert forward == backward == build_prompts(spec, 12)
    # Far indices cost no more than near ones (nothing is built before them).
    assert a.prompt(10_000_000).osl == 7
    assert PromptSource(WorkloadSpec(isl=40, osl=7, isl_stddev=8, seed=4)).prompt(0) != forward[0]


def test_a_worker_builds_its_own_indices() -> None:
    client = ClientSettings("http://127.0.0.1:1", "m")
    spec = WorkloadSpec(isl=16, osl=4)
    whole = build_prompts(spec, 10)
    for w in (0, 1):
        source = JobSource(JobSpec(client, spec, metrics_lm(), start=w, step=2, stop=10, warmup=3))
        jobs = list(source)
        assert [j.index for j in jobs] == list(range(w, 10, 2))
        assert [j.isl for j in jobs] == [whole[i].isl for i in range(w, 10, 2)]
        assert [j.warmup for j in jobs] == [j.index < 3 for j in jobs]
    endless = JobSource(JobSpec(client, spec, metrics_lm(), start=0, step=1, stop=None, warmup=0,
                                low_water=8))  # fmt: skip
    endless.prefill()
    assert not endless.exhausted and endless.needs_refill() is False
    assert [endless.next().index for _ in range(100)] == list(range(100))  # type: ignore[union-attr]


def test_a_closed_loop_s_spare_requests_are_built_before_they_are_asked() -> None:
    client = ClientSettings("http://127.0.0.1:1", "m")
    spec = WorkloadSpec(isl=16, osl=4)
    source = JobSource(JobSpec(client, spec, metrics_lm(), start=0, step=1, stop=6, warmup=0,
                               spares=4))  # fmt: skip
    source.prefill()
    # The whole sequence fits before the run, and so do the slots' spares.
    assert source.exhausted and not source.needs_refill()
    built = source._prompts.prompt
    asked: list[int] = []
    source._prompts.prompt = lambda i: asked.append(i) or built(i)  # type: ignore[method-assign]  # count builds
    spares = [source.spare() for _ in range(4)]
    assert asked == []  # nothing built on the spot
    assert [j.warmup for j in spares] == [True] * 4  # never measured
    assert len({j.index for j in spares}) == 4 and min(j.index for j in spares) >= 1 << 40
    # Taken, they are built again in the background (a slice at a time), not when asked.
    assert source.needs_refill()
    source.refill()
    assert not source.needs_refill() and len(asked) == 4
    # Past what is held, a spare is still built on the spot rather than refused.
    assert len({source.spare().index for _ in range(6)} | {j.index for j in spares}) == 10
    # An open loop keeps none.
    open_ = JobSource(JobSpec(client, spec, metrics_lm(), start=0, step=1, stop=6, warmup=0))
    open_.prefill()
    assert open_.exhausted and not open_.needs_refill()


def metrics_lm():  # type: ignore[no-untyped-def]
    from pytest_llmslo.load.promptlengths import LengthModel

    return LengthModel()


def test_backlog_decodes_past_its_budget_in_slices() -> None:
    body = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n' * 50
    body += b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    backlog = Backlog(0, budget=len(body) * 10, slice_ns=10**12)
    for i in range(20):
        raw = RawExchange()
        raw.sent_ns, raw.status, raw.end_ns = 1, 200, 2
        raw.times, raw.pieces = [1], [body]
        backlog.add(Job(i, b"", 8, 50, False), 0, raw)
    assert backlog.over_budget
    backlog.decode_slice()
    # Down to three quarters of the budget, oldest first, and no further.
    assert [r.index for r in backlog.records] == list(range(13))
    assert not backlog.over_budget and len(backlog) == 7
    backlog.drain()
    assert len(backlog.records) == 20 and all(r.ok for r in backlog.records)


def test_backlog_decodes_for_a_slice_whatever_its_budget() -> None:
    """After a stop the parent decodes while the workers cut: a slice at a time, under the
    budget too, at least one exchange a slice, oldest first."""
    body = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n' * 50
    body += b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    backlog = Backlog(0, budget=len(body) * 100)
    for i in range(5):
        raw = RawExchange()
        raw.sent_ns, raw.status, raw.end_ns = 1, 200, 2
        raw.times, raw.pieces = [1], [body]
        backlog.add(Job(i, b"", 8, 50, False), 0, raw)
    assert not backlog.over_budget
    backlog.decode_for(0)
    assert [r.index for r in backlog.records] == [0] and len(backlog) == 4
    backlog.decode_for(10**12)
    assert len(backlog) == 0 and [r.index for r in backlog.records] == list(range(5))
    assert backlog.decode_cpu_ns == 0  # not decoding during the run
    assert len(backlog.drain()) == 5


def test_a_level_bounded_by_time_alone(fixed_url: str) -> None:
    client = ClientSettings(fixed_url, "fixed", processes=1)
    wl = WorkloadSpec(isl=8, osl=20, calibrate=False)
    level = LoadLevel.concurrency(4)
    run = run_load_sync(LoadJob(client, wl, level, requests=None, warmup=4, duration_s=1.0))
    assert run.meta["requests"] is None and len(run.records) > 8
    assert all(r.ok for r in run.records)
    with pytest.raises(Exception, match="a request count, a duration, or both"):
        run_load_sync(
            LoadJob(client, WorkloadSpec(isl=8, osl=4), LoadLevel.concurrency(1), requests=None)
        )


@pytest.mark.parametrize("processes", [1, 2])
def test_early_stop_ends_a_level_whose_violation_is_shown(fixed_url: str, processes: int) -> None:
    # TTFT is about 50 ms: "ttft_p99 < 20" is violated, and a lower bound shows it after a
    # few hundred requests of the 5,000 asked for.
    objectives = (slo.ttft_p99 < 20,)
    level = LoadLevel.concurrency(32)

    def decide(records: object) -> str | None:
        from pytest_llmslo.records import Run

        recs = tuple(records)  # type: ignore[arg-type]
        partial = Run(level, recs, min(r.sent_ns for r in recs), max(r.end_ns for r in recs))
        return slo.settled(partial, objectives, min_completed=100)

    client = ClientSettings(fixed_url, "fixed", processes=processes)
    t0 = time.monotonic()
    run = run_load_sync(LoadJob(client, WorkloadSpec(isl=8, osl=20, calibrate=False), level,
                        requests=5000, warmup=0, early_stop=decide))  # fmt: skip
    assert time.monotonic() - t0 < 60
    assert 100 <= len(run.records) < 5000
    assert "is violated at 95% confidence" in run.meta["early_stop"]["reason"]
    # The requests in flight when it stopped finished and were measured: none was cut.
    assert run.meta["cancelled"] == 0 and all(r.ok for r in run.records)
    assert metrics.summarize(run).early_stop == run.meta["early_stop"]["reason"]
