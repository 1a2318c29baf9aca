"""Running a load: closed or open loop, in one or several processes, measured.

``run_load`` drives a workload at a level:

- closed loop (``LoadLevel.concurrency(n)``): n slots, each sends its next request as soon
  as its previous one ended; that moment is the request's scheduled time;
- open loop (``LoadLevel.rate(r, "constant"|"poisson", seed)``): request i is sent at the
  absolute time ``t0 + offsets[i]`` (``schedule.py``), whatever happened before it.

Requests are built by each worker from the workload's seed, index by index
(``jobs.JobSource``): all of them before the run when they fit a memory budget, else ahead
of need during it, in slices. A level bounded by ``duration_s`` alone (``requests=None``)
has no request count at all. Responses are decoded into records after the run, or, past a
byte budget, during it (``backlog.Backlog``): with several processes the workers ship the
raw bytes to the parent, which decodes them, so a worker's event loop never decodes at
all; a lone in-process worker decodes in slices of about a millisecond. No bulk work ever
holds the loop that takes timestamps, which is what keeps long runs as true as short ones.

Several processes: above a modest load one Python event loop cannot read hundreds of
streams without its own lag showing up as latency, so the load is split over worker
processes (``python -m pytest_llmslo.load.worker``), each with its own event loop and
connection pool. They start, report ready, and all begin at one absolute ``t0``
(``perf_counter_ns`` is ``CLOCK_MONOTONIC``, shared by every process on Linux, so their
timestamps are comparable); their records are merged. ``ClientSettings.processes``
overrides the automatic choice (``auto_processes``).

Phases: ``calibrating`` (a few probes that fit prompt lengths to the server), ``warm-up``
(the first ``warmup`` requests of the sequence, sent and discarded), ``measuring`` and,
after a duration bound or an early stop, ``draining``; the progress callback names them.
A closed loop cools down: a slot whose measured requests are over keeps the engine at the
level's concurrency with requests that are not measured (``JobSource.spare``) until the
worker's last measured request ends, then those are cancelled; ``run.meta["cooldown_sent"]``
counts them. The last wave is then measured at the level's load, not in a shrinking batch.

The level's wall-clock bound (``level_timeout_s``) covers every phase: calibration, warm-up
and measurement count against it. When it passes, nothing more is sent and the measured
requests still in flight are cut and recorded as ``cancelled``; ``run.meta["level_timeout"]``
says in which phase it passed. A stalled or dead server therefore ends a level within the
bound, whatever the request deadlines (``deadlines.py``) are.
Duration bound: ``duration_s`` counts from the first *measured* send (a warm-up never eats
the measured time). After it no new request is sent, and the requests in flight get
``grace_s`` (default 30 s) to finish and be measured: cutting them at once would drop the
slowest requests of a loaded engine, exactly the tail a P99 is about. Requests still running
after the grace period are cut and *recorded as failures* of kind ``"cancelled"``, with what
they had (send time, status, the chunks that arrived, ``end_ns`` = the cut): leaving them
out would bias the percentiles low without a word, since they are the slowest requests of
the run. They count in the error rate and are never good for goodput or attainment;
``run.meta["cancelled"]`` says how many there were. On Ctrl-C or task cancellation the
requests in flight are cut at once, recorded the same way, and ``LoadInterrupted``
carries the partial run. SIGTERM (how CI systems stop a job) is handled like Ctrl-C:
the level in progress is cut and kept, also when a second signal follows while it is cut;
a third interrupts at once.

Early stop: ``early_stop`` is a callback that sees the decoded records about twice a
second and returns why the level's verdict is settled (or None); the level then drains like
at its duration bound: nothing new is sent, the requests in flight finish and are
measured. ``run.meta["early_stop"]`` keeps the reason.

The client checks itself (``health.py``): schedule lag, event-loop lag and its stalls, CPU.
``HealthThresholds`` says when the client, not the engine, was the bottleneck; the run is
then ``valid=False`` with the reasons.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter_ns
from typing import Any, Literal

import numpy as np

from .._version import __version__
from ..errors import LoadError, LoadInterrupted
from ..records import LoadLevel, RequestRecord, Run
from .backlog import DEFAULT_BUDGET, Backlog, Packed, pack
from .calibrate import calibrate, measure_overhead
from .client import ClientSettings, RawExchange, Transport, new_event_loop
from .health import HealthThresholds, assess
from .jobs import Job, JobSource, JobSpec
from .schedule import arrival_offsets_ns, expected_arrivals, split_concurrency
from .sse import stream_text
from .traces import read_trace
from .transports import make_transport
from .workload import Conversation, LengthModel, WorkloadSpec

__all__ = [
    "EarlyStop",
    "HealthThresholds",
    "Phase",
    "Progress",
    "auto_processes",
    "run_load",
    "run_load_sync",
    "worker_main",
]

_TICK_NS = 10_000_000  # event-loop lag ticker period
_YOUNG_GC_NS = 200_000_000  # how often the young generations are collected during a run
_PROGRESS_S = 0.25
_SHIP_S = 0.05  # how often a worker hands its finished exchanges to the parent
_EARLY_STOP_EVERY_S = 0.5
_START_MARGIN_NS = 50_000_000  # t0 this far after every worker said ready
_READY_TIMEOUT_S = 300.0  # workers build their requests before saying ready
_RESULT_TIMEOUT_S = 60.0  # after cancelling, how long to wait for workers' partial results

Phase = Literal["calibrating", "warm-up", "measuring", "draining"]

#: Sees the records decoded so far; returns why the level may stop now, or None.
EarlyStop = Callable[[Sequence[RequestRecord]], "str | None"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report: ``done`` of ``total`` requests of the current ``phase``
    (``total`` 0: bounded by time alone; ``calibrating``: probes; ``draining``: the
    duration bound passed or the level stopped early, the requests in flight may finish).
    ``left_s`` is the time to the level's bound, when it has one."""

    done: int
    total: int
    failed: int
    elapsed_s: float
    warmup: bool
    phase: Phase = "measuring"
    left_s: float | None = None


@dataclass(slots=True)
class _Plan:
    worker: int
    jobs: JobSpec
    closed: bool
    slots: int
    max_connections: int | None
    stall_ns: int
    defer_bytes: int = DEFAULT_BUDGET
    cap: int | None = None  # an open loop's cap on requests in flight (this worker's share)

    @property
    def settings(self) -> ClientSettings:
        return self.jobs.settings


@dataclass(slots=True)
class _WorkerResult:
    worker: int
    records: list[RequestRecord] = field(default_factory=list)
    warmup_done: int = 0
    cancelled: int = 0
    schedule_lag_ns: list[int] = field(default_factory=list)
    loop_lag_ns: list[int] = field(default_factory=list)
    stalls: list[tuple[int, int]] = field(default_factory=list)
    cpu_s: float = 0.0
    sys_s: float = 0.0
    decode_s: float = 0.0  # after the run
    decode_run_s: float = 0.0  # in slices during the run
    longest_slice_ms: float = 0.0
    built_during_run: int = 0
    wall_s: float = 0.0
    t0_ns: int = 0
    hit_level_bound: bool = False
    cooldown_sent: int = 0
    cap_delayed: int = 0  # measured requests an open loop's cap held back
    cap_wait_ns: int = 0
    cap_wait_max_ns: int = 0
    sessions_started: int = 0
    sessions_finished: int = 0  # conversations whose every turn completed
    kernel_stamps: bool = False  # the transport dated reads by the kernel's arrival stamp
    closed: bool = False
    slots: int = 0  # a closed loop's requests in flight asked of this worker
    multi_turn: bool = False
    # (sent, end) of the requests in flight that are not measured (warm-up, cool-down):
    # the load the engine saw includes them (health.applied_load).
    side_flight: list[tuple[int, int]] = field(default_factory=list)


class _Counter:
    __slots__ = ("done", "failed", "warm_done")

    def __init__(self) -> None:
        self.done = 0
        self.failed = 0
        self.warm_done = 0


def auto_processes(level: LoadLevel, osl: int, transport: str = "fast") -> int:
    """Client processes for a load, at most the machine's cores.

    Fast transport: one up to ~128 streams (or ~6,000 chunks/s of open loop), then one per
    ~192 streams. httpx costs several times more per chunk (see docs/load.md): one per
    ~24 streams (or ~1,000 chunks/s).
    """
    cores = os.cpu_count() or 1
    one, per = (128, 192) if transport == "fast" else (24, 24)
    if level.mode == "concurrency":
        need = 1 if level.value <= one else math.ceil(level.value / per)
    else:
        chunks_s = level.value * max(osl, 1)
        budget = 6000 if transport == "fast" else 1000
        need = 1 if chunks_s <= budget else math.ceil(chunks_s / budget)
    return max(1, min(need, cores))


async def _sleep_until(t_ns: int) -> None:
    delay = t_ns - perf_counter_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)


async def _loop_ticker(samples: list[int], stalls: list[tuple[int, int]], stall_ns: int) -> None:
    """Every 10 ms, how late the loop woke; a wake later than ``stall_ns`` is a stall window
    from when it should have woken to when the reads held up by the stall were taken.
    Those reads are processed after the stall, before this wake or, when the stall was a
    callback that ran just before the ticker in one iteration, in the next iteration: the
    window ends two iterations later (the first starts with this task, before that
    iteration's reads), so that it holds them either way."""
    nxt = perf_counter_ns() + _TICK_NS
    while True:
        await _sleep_until(nxt)
        now = perf_counter_ns()
        lag = max(now - nxt, 0)
        samples.append(lag)
        if lag > stall_ns:
            for _ in range(2):
                await asyncio.sleep(0)
            stalls.append((nxt, perf_counter_ns()))
        nxt = now + _TICK_NS


@dataclass(slots=True)
class _Bound:
    """The time bounds of one worker. The duration's clock starts at the first measured
    send; ``level_end_ns`` is the level's absolute wall-clock bound (all phases);
    ``drain_now`` (early stop) ends the sending at once, like the duration bound."""

    duration_ns: int | None
    grace_ns: int
    level_end_ns: int | None = None
    send_until_ns: int | None = None

    def start(self, now_ns: int) -> None:
        if self.duration_ns is not None and self.send_until_ns is None:
            self.send_until_ns = now_ns + self.duration_ns

    def drain_now(self, now_ns: int | None = None) -> None:
        now_ns = perf_counter_ns() if now_ns is None else now_ns
        if self.send_until_ns is None or self.send_until_ns > now_ns:
            self.send_until_ns = now_ns

    def expired(self, at_ns: int) -> bool:
        """No request may be sent at ``at_ns``."""
        if self.level_end_ns is not None and at_ns >= self.level_end_ns:
            return True
        return self.send_until_ns is not None and at_ns >= self.send_until_ns

    def drain_end_ns(self) -> int | None:
        """When requests still in flight are cut (None: no bound known yet)."""
        end = None if self.send_until_ns is None else self.send_until_ns + self.grace_ns
        if self.level_end_ns is not None:
            end = self.level_end_ns if end is None else min(end, self.level_end_ns)
        return end


async def _wait_bounded(
    tasks: set[asyncio.Task[None]], waiter: asyncio.Future[Any], bound: _Bound
) -> None:
    """Wait for ``tasks`` until they are done, the stop event fires, or the bound's drain
    ends. The bound can change while waiting (the duration's clock starts, an early stop
    drains): look again four times a second."""
    while any(not t.done() for t in tasks) and not waiter.done():
        end = bound.drain_end_ns()
        left = 0.25 if end is None else (end - perf_counter_ns()) / 1e9
        if left <= 0:
            return
        await _wait_tasks(tasks, waiter, min(left, 0.25))


async def _wait_tasks(
    tasks: set[asyncio.Task[None]], waiter: asyncio.Future[Any], timeout: float | None
) -> None:
    """Wait until every task is done, the stop event fires, or the timeout passes."""
    if timeout is not None and timeout <= 0:
        return
    pending = set(tasks)
    deadline = None if timeout is None else time.monotonic() + timeout
    while pending:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        done, pending_now = await asyncio.wait(
            [*pending, waiter], timeout=left, return_when=asyncio.FIRST_COMPLETED
        )
        if waiter in done:
            return
        pending = {t for t in pending_now if t is not waiter}  # type: ignore[misc]
        # A slot that raised (a bug, not a request failure) must not be swallowed.
        for t in done:
            if t is not waiter and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]


async def _drive(
    plan: _Plan,
    source: JobSource,
    transport: Transport,
    t0_ns: int,
    bound: _Bound,
    stop: asyncio.Event,
    counter: _Counter,
    on_record: Callable[[RequestRecord], None] | None = None,
    ship: Callable[[Job, int, RawExchange], None] | None = None,
) -> _WorkerResult:
    """Send one worker's jobs; shared by the in-process path and the worker processes.
    The transport is made before ``t0_ns`` is fixed: an httpx client takes tens of
    milliseconds to set up, which would otherwise delay the first requests past their
    scheduled time. ``ship`` takes each finished exchange instead of the local backlog
    (a worker process hands them, undecoded, to the parent)."""
    res = _WorkerResult(
        plan.worker,
        t0_ns=t0_ns,
        closed=plan.closed,
        slots=plan.slots,
        multi_turn=plan.jobs.workload.multi_turn,
    )
    res.kernel_stamps = transport.kernel_stamps
    loop = asyncio.get_running_loop()
    ticker = loop.create_task(_loop_ticker(res.loop_lag_ns, res.stalls, plan.stall_ns))
    lags = res.schedule_lag_ns
    backlog = Backlog(plan.worker, plan.defer_bytes, on_record=on_record)
    deliver = ship or backlog.add
    built_before = source.built

    async def housekeeping() -> None:
        # Decoding past the budget, building jobs ahead of need and collecting young
        # garbage, a slice at a time.
        young_at = perf_counter_ns() + _YOUNG_GC_NS
        while True:
            busy = False
            if backlog.over_budget:
                backlog.decode_slice()
                busy = True
            if source.needs_refill():
                source.refill()
                busy = True
            if perf_counter_ns() >= young_at:
                gc.collect(1)
                young_at = perf_counter_ns() + _YOUNG_GC_NS
            await asyncio.sleep(0 if busy else 0.005)

    keeper = loop.create_task(housekeeping())
    cut_reason = "cut by the duration bound: still running after the grace period"

    def cut(job: Job, scheduled: int, raw: RawExchange) -> None:
        """Record a measured request cut while in flight, as a ``cancelled`` failure."""
        if job.warmup or not raw.sent_ns:
            return
        raw.end_ns = perf_counter_ns()
        raw.kind, raw.error = "cancelled", cut_reason
        res.cancelled += 1
        counter.done += 1
        counter.failed += 1
        lags.append(raw.sent_ns - scheduled)
        deliver(job, scheduled, raw)

    async def one(
        job: Job, scheduled: int, headers: Mapping[str, str] | None = None
    ) -> RawExchange:
        raw = RawExchange()
        try:
            await transport.send(job.body, raw, headers)
        except asyncio.CancelledError:
            if job.warmup and raw.sent_ns:
                res.side_flight.append((raw.sent_ns, perf_counter_ns()))
            cut(job, scheduled, raw)
            raise
        if job.warmup:
            counter.warm_done += 1
            res.warmup_done += 1
            res.side_flight.append((raw.sent_ns, raw.end_ns or perf_counter_ns()))
            return raw
        counter.done += 1
        if raw.kind is not None or not 200 <= raw.status < 300:
            counter.failed += 1
        lags.append(raw.sent_ns - scheduled)
        deliver(job, scheduled, raw)
        return raw

    cap = asyncio.Semaphore(plan.cap) if plan.cap else None

    async def gated(job: Job, at: int, headers: Mapping[str, str] | None = None) -> RawExchange:
        """An open loop's send under its cap on requests in flight: an arrival that finds
        the cap reached waits for a slot, and its scheduled time becomes the moment the
        slot opened (the wait is the cap's, reported apart, not the client's lag)."""
        if cap is None:
            return await one(job, at, headers)
        if cap.locked():
            await cap.acquire()
            now = perf_counter_ns()
            if now > at:
                if not job.warmup:
                    res.cap_delayed += 1
                    res.cap_wait_ns += now - at
                    res.cap_wait_max_ns = max(res.cap_wait_max_ns, now - at)
                at = now
        else:
            await cap.acquire()
        try:
            return await one(job, at, headers)
        finally:
            cap.release()

    multi = plan.jobs.workload.multi_turn

    async def converse(
        conv: Conversation,
        warm: bool,
        at: int,
        send: Callable[[Job, int, Mapping[str, str] | None], Awaitable[RawExchange]],
    ) -> None:
        """The turns of one conversation, each after the think time that follows the end
        of the one before it; a failed turn ends the conversation (a user whose answer did
        not come does not go on), and so do the bounds."""
        headers = source.session_headers(conv)
        history: list[tuple[str, str]] = []
        isl = 0
        if not warm:
            res.sessions_started += 1
        for k, turn in enumerate(conv.turns):
            if k:
                at = perf_counter_ns() + int(conv.think_s[k] * 1e9)
                if stop.is_set() or bound.expired(at):
                    return
                await _sleep_until(at)
                if stop.is_set() or bound.expired(at):
                    return
            isl += turn.isl
            job = source.turn_job(conv, k, history, warm, isl)
            if not warm:
                bound.start(at)
            raw = await send(job, at, headers)
            if raw.kind is not None or not 200 <= raw.status < 300:
                return
            reply = stream_text(raw.pieces)
            history.append((turn.text, reply))
            isl += max(1, len(raw.times)) if not reply else len(reply.split())
        if not warm:
            res.sessions_finished += 1

    tasks: set[asyncio.Task[Any]] = set()
    # A full collection walks every live object (tens of thousands of records and
    # responses by the end of a run) and held the loop for 50 ms at c=512: no full
    # collection runs during the run. What existed before it is frozen out of the
    # collector's sight, and housekeeping collects the young generations, which is where
    # nearly all garbage dies; the cycles that reach the old one wait for the run's end.
    gc_was_enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    cpu0 = time.process_time()
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    wall0 = perf_counter_ns()
    try:
        await _sleep_until(t0_ns)
        if plan.closed:
            # Cool-down: a slot whose measured requests are over keeps sending requests that
            # are not measured until the worker's last measured one ends, so every measured
            # request runs at the level's concurrency to its last token. Without it the
            # last wave streams in a shrinking batch, faster than the engine serves c
            # streams (a 1.3-wave level at c48 read 17 % above the engine's throughput).
            slots_measuring = max(plan.slots, 1)
            cooled = asyncio.Event()
            cooling: set[asyncio.Future[None]] = set()

            def measured_over() -> None:
                if slots_measuring == 0 and measuring[0] == 0 and not cooled.is_set():
                    cooled.set()
                    for f in cooling:
                        f.cancel()

            async def measured(
                job: Job, scheduled: int, headers: Mapping[str, str] | None = None
            ) -> RawExchange:
                if job.warmup:
                    return await one(job, scheduled, headers)
                measuring[0] += 1
                try:
                    return await one(job, scheduled, headers)
                finally:
                    measuring[0] -= 1
                    measured_over()

            async def slot() -> None:
                nonlocal slots_measuring
                scheduled = t0_ns
                try:
                    while not stop.is_set() and not bound.expired(scheduled):
                        if multi:
                            got = source.next_conversation()
                            if got is None:
                                break
                            await converse(got[0], got[1], scheduled, measured)
                        else:
                            job = source.next()
                            if job is None:
                                break
                            if not job.warmup:
                                bound.start(scheduled)
                            raw = await measured(job, scheduled)
                            # Due again when the response's last byte arrived: the lag of
                            # the next send is the client's turnaround (health.py).
                            scheduled = raw.end_ns or perf_counter_ns()
                            continue
                        scheduled = perf_counter_ns()
                finally:
                    slots_measuring -= 1
                    measured_over()
                while not cooled.is_set() and not stop.is_set():
                    end = bound.drain_end_ns()
                    if end is not None and perf_counter_ns() >= end:
                        return
                    spare = RawExchange()
                    f = asyncio.ensure_future(transport.send(source.spare().body, spare))
                    cooling.add(f)
                    res.cooldown_sent += 1
                    try:
                        await f
                    except asyncio.CancelledError:
                        if cooled.is_set():
                            return  # the last measured request ended: cool-down is over
                        raise  # this slot itself was cancelled
                    finally:
                        cooling.discard(f)
                        if spare.sent_ns:
                            end = spare.end_ns or perf_counter_ns()
                            res.side_flight.append((spare.sent_ns, end))

            measuring = [0]
            tasks = {asyncio.ensure_future(slot()) for _ in range(max(plan.slots, 1))}
            waiter: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
            await _wait_bounded(tasks, waiter, bound)
            waiter.cancel()
        else:

            async def scheduler() -> None:
                while True:
                    if multi:
                        got = source.next_conversation()
                        if got is None:
                            return
                        conv, warm, offset = got
                    else:
                        job = source.next()
                        if job is None:
                            return
                        warm, offset = job.warmup, job.offset_ns
                    at = t0_ns + offset
                    if bound.expired(at):
                        return
                    if not warm:
                        bound.start(at)
                    await _sleep_until(at)
                    if stop.is_set() or bound.expired(at):
                        return
                    if multi:
                        t = asyncio.ensure_future(converse(conv, warm, at, gated))
                    else:
                        t = asyncio.ensure_future(gated(job, at))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)

            sched = asyncio.ensure_future(scheduler())
            waiter = asyncio.ensure_future(stop.wait())
            await _wait_bounded({sched}, waiter, bound)
            while not stop.is_set() and not sched.cancelled() and tasks:
                # A conversation's task adds no new task; wait for what is in flight.
                await _wait_bounded(set(tasks), waiter, bound)
                end = bound.drain_end_ns()
                if end is not None and perf_counter_ns() >= end:
                    break
            sched.cancel()
            waiter.cancel()
    finally:
        if stop.is_set():
            cut_reason = "cut by an interrupt of the run"
        elif bound.level_end_ns is not None and perf_counter_ns() >= bound.level_end_ns:
            res.hit_level_bound = True
            cut_reason = "cut by the level's time bound (--level-timeout)"
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            # Every task still pending is inside a request (a closed-loop slot only waits
            # in one()): one() records each measured one as cancelled.
            await asyncio.gather(*pending, return_exceptions=True)
        res.cpu_s = time.process_time() - cpu0
        res.sys_s = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
        res.wall_s = (perf_counter_ns() - wall0) / 1e9
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()
        for task in (ticker, keeper):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await transport.aclose()
        res.decode_run_s = backlog.decode_cpu_ns / 1e9
        res.longest_slice_ms = backlog.longest_slice_ns / 1e6
        res.built_during_run = source.built - built_before
        d0 = time.process_time()
        backlog.drain()
        res.decode_s = time.process_time() - d0
        res.records = backlog.records
    return res


# -- worker processes ------------------------------------------------------------------


class _Outbox:
    """A worker's messages to the parent, written by a thread of their own: a full socket
    (the parent busy) blocks that thread, never the event loop that takes timestamps."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="llmslo-outbox", daemon=True)
        self._thread.start()

    def put(self, msg: tuple[Any, ...]) -> None:
        self._queue.put(msg)

    def _run(self) -> None:
        while (msg := self._queue.get()) is not None:
            try:
                self._conn.send(msg)
            except (OSError, ValueError):
                return  # the parent went away

    def close(self, timeout: float = 60.0) -> None:
        """Send what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)


def worker_main(fd: int) -> None:
    """Entry point of one worker process (``python -m pytest_llmslo.load.worker FD``)."""
    # The parent turns Ctrl-C and SIGTERM into a "stop" message; a handler here would cut
    # requests before the parent could collect them (a CI runner signals the whole group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    outbox: _Outbox | None = None
    try:
        plan = conn.recv()
        source = JobSource(plan.jobs)
        source.prefill()
        transport = make_transport(plan.settings, plan.max_connections)
        conn.send(("ready", plan.worker))
        msg = conn.recv()
        if msg[0] != "go":
            return
        _, t0_ns, duration_ns, grace_ns, level_end_ns = msg
        outbox = _Outbox(conn)
        loop = new_event_loop(plan.settings.event_loop)
        try:
            bound = _Bound(duration_ns, grace_ns, level_end_ns)
            res = loop.run_until_complete(
                _worker_async(conn, outbox, plan, source, transport, t0_ns, bound)
            )
        finally:
            loop.close()
        outbox.put(("result", res))
        outbox.close()
    except Exception:
        import traceback

        if outbox is not None:
            outbox.put(("error", traceback.format_exc()))
            outbox.close()
        else:
            with contextlib.suppress(Exception):
                conn.send(("error", traceback.format_exc()))
    finally:
        with contextlib.suppress(Exception):
            conn.close()


async def _worker_async(
    conn: Any,
    outbox: _Outbox,
    plan: _Plan,
    source: JobSource,
    transport: Transport,
    t0_ns: int,
    bound: _Bound,
) -> Any:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    counter = _Counter()
    finished: list[Packed] = []

    def control() -> None:
        # A blocking reader thread rather than loop.add_reader: uvloop makes a watched fd
        # non-blocking, and a large blocking send() on it (the results) would then break.
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = ("stop",)  # the parent went away
            with contextlib.suppress(RuntimeError):
                if msg[0] == "drain":
                    loop.call_soon_threadsafe(bound.drain_now)
                    continue
                if msg[0] == "stop":
                    loop.call_soon_threadsafe(stop.set)
            if msg[0] == "stop":
                return

    threading.Thread(target=control, name="llmslo-control", daemon=True).start()

    def ship(job: Job, scheduled: int, raw: RawExchange) -> None:
        finished.append(pack(job.index, job.isl, job.osl, scheduled, raw, job.session, job.turn))

    def flush() -> None:
        if finished:
            outbox.put(("raw", plan.worker, finished[:]))
            finished.clear()

    async def report() -> None:
        ticks = 0
        while True:
            await asyncio.sleep(_SHIP_S)
            flush()
            ticks += 1
            if ticks % round(_PROGRESS_S / _SHIP_S) == 0:
                outbox.put(
                    ("progress", plan.worker, counter.done, counter.failed, counter.warm_done)
                )

    reporter = loop.create_task(report())
    try:
        return await _drive(plan, source, transport, t0_ns, bound, stop, counter, ship=ship)
    finally:
        reporter.cancel()
        flush()


# -- the public entry points -------------------------------------------------------------


def _assemble(
    level: LoadLevel,
    results: list[_WorkerResult],
    warmup: int,
    meta: dict[str, Any],
    th: HealthThresholds,
    nproc: int,
) -> Run:
    records = sorted((r for res in results for r in res.records), key=lambda r: r.index)
    start = min((r.sent_ns for r in records), default=0)
    end = max((r.end_ns for r in records), default=start)
    meta = dict(meta)
    meta["cancelled"] = sum(r.cancelled for r in results)
    meta["warmup_completed"] = sum(r.warmup_done for r in results)
    meta["cooldown_sent"] = sum(r.cooldown_sent for r in results)
    traffic = dict(meta.get("traffic") or {})
    if level.max_concurrency is not None:
        waits = [r.cap_wait_max_ns for r in results]
        delayed = sum(r.cap_delayed for r in results)
        traffic["cap"] = {
            "max_concurrency": level.max_concurrency,
            "delayed": delayed,
            "wait_mean_ms": sum(r.cap_wait_ns for r in results) / delayed / 1e6 if delayed else 0.0,
            "wait_max_ms": max(waits, default=0) / 1e6,
        }
    if any(r.sessions_started for r in results):
        traffic["sessions_started"] = sum(r.sessions_started for r in results)
        traffic["sessions_finished"] = sum(r.sessions_finished for r in results)
    meta["traffic"] = traffic
    # Kernel time is most of a socket read's cost; the split says how much is left to win.
    meta["client_cpu"] = {
        "cpu_s": sum(r.cpu_s for r in results),
        "sys_s": sum(r.sys_s for r in results),
        # SSE split and JSON decoding after the run (not in cpu_s: off the hot path), and
        # what was decoded during it, in slices (in cpu_s).
        "decode_s": sum(r.decode_s for r in results),
        "decode_during_run_s": sum(r.decode_run_s for r in results),
        "longest_decode_slice_ms": max((r.longest_slice_ms for r in results), default=0.0),
        "requests_built_during_run": sum(r.built_during_run for r in results),
        "per_process_util": [r.cpu_s / r.wall_s if r.wall_s else 0.0 for r in results],
    }
    return Run(
        level=level,
        records=tuple(records),
        start_ns=start,
        end_ns=end,
        warmup_requests=warmup,
        health=assess(results, th, nproc),
        meta=meta,
    )


async def run_load(
    client: ClientSettings,
    workload: WorkloadSpec,
    level: LoadLevel,
    *,
    requests: int | None,
    warmup: int = 200,
    duration_s: float | None = None,
    grace_s: float = 30.0,
    level_timeout_s: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    meta: Mapping[str, Any] | None = None,
    thresholds: HealthThresholds | None = None,
    early_stop: EarlyStop | None = None,
    defer_bytes: int = DEFAULT_BUDGET,
) -> Run:
    """Run ``warmup`` + ``requests`` requests of ``workload`` at ``level`` and return the
    measured ``Run`` (warm-up discarded); ``requests=None`` runs until ``duration_s``.
    See the module docstring for the duration bound, the level's time bound, early stop,
    cancellation and health; ``defer_bytes`` is the decoding budget of ``backlog.py``."""
    if requests is None and duration_s is None and level.arrival != "trace":
        raise LoadError("a level needs a request count, a duration, or both (a trace: neither)")
    if requests is not None and requests < 1:
        raise LoadError(f"requests must be >= 1, got {requests}")
    if warmup < 0:
        raise LoadError(f"warmup must be >= 0, got {warmup}")
    if duration_s is not None and not duration_s > 0:
        raise LoadError(f"duration_s must be > 0, got {duration_s}")
    if not grace_s >= 0:
        raise LoadError(f"grace_s must be >= 0, got {grace_s}")
    if level_timeout_s is not None and not level_timeout_s > 0:
        raise LoadError(f"level_timeout_s must be > 0, got {level_timeout_s}")
    th = thresholds or HealthThresholds()
    started = time.monotonic()
    level_end_ns = (
        None if level_timeout_s is None else perf_counter_ns() + int(level_timeout_s * 1e9)
    )

    def left_s() -> float | None:
        return None if level_end_ns is None else max(level_end_ns - perf_counter_ns(), 0) / 1e9

    run_meta: dict[str, Any] = {
        "harness": "pytest-llmslo",
        "harness_version": __version__,
        "workload": workload.to_dict(),
        "client": client.to_dict(),
        "level": level.to_dict(),
        "requests": requests,
        "warmup": warmup,
        "duration_s": duration_s,
        "grace_s": grace_s,
        "level_timeout_s": level_timeout_s,
        "early_stop": None,
        "health_thresholds": th.to_dict(),
    }
    run_meta.update(dict(meta or {}))

    calibration: dict[str, Any] = {"fitted": False, "reason": "not needed"}
    lm = LengthModel()
    if workload.needs_calibration or workload.measures_overhead:
        if progress is not None:
            progress(Progress(0, 0, 0, 0.0, False, "calibrating", left_s()))
        probe = calibrate if workload.needs_calibration else measure_overhead
        try:
            lm, calibration = await asyncio.wait_for(probe(client, workload), left_s())
        except (asyncio.TimeoutError, TimeoutError):
            # Nothing was measured: the level ends here, as a level without requests.
            run_meta["calibration"] = {"fitted": False, "error": "cut by the level's time bound"}
            run_meta["level_timeout"] = {"phase": "calibrating", "bound_s": level_timeout_s}
            run_meta["processes"] = 0
            return _assemble(level, [], warmup, run_meta, th, 1)
    run_meta["calibration"] = calibration

    closed = level.mode == "concurrency"
    # A multi-turn workload's unit is a conversation: the request counts become counts of
    # conversations of ``turns`` turns (rounded up), and a level's value counts them too.
    per = workload.turns if workload.multi_turn else 1
    units_warm = -(-warmup // per)
    total: int | None = None if requests is None else units_warm + -(-requests // per)
    offsets: np.ndarray | None = None
    traffic: dict[str, Any] = {}
    if level.arrival == "trace":
        if workload.kind != "trace":
            raise LoadError(
                f"a trace level ({level.label}) replays a trace workload; this workload is "
                f"{workload.kind!r}: give a trace (--trace-file) or a rate or concurrency"
            )
        trace = read_trace(
            workload.path or "",
            workload.trace_format,
            start_s=workload.trace_start_s,
            window_s=workload.trace_window_s,
            limit=total,
        )
        offsets = trace.offsets_ns(level.value)
        total = len(offsets)
        units_warm = min(units_warm, max(total - 1, 0))
        traffic["trace"] = trace.describe()
    elif not closed:
        # An open loop's schedule is fixed up front; bounded by time alone, it holds the
        # arrivals of the duration (a profile's, when it is shorter).
        n = total if total is not None else units_warm + expected_arrivals(level, duration_s)
        offsets = np.asarray(arrival_offsets_ns(level, n), dtype=np.int64)
        total = len(offsets)
        if total <= units_warm:
            raise LoadError(
                f"level {level.label}: its profile ({level.profile_s:g} s) holds {total} "
                f"arrivals, not more than the {units_warm} of the warm-up; lengthen the "
                "profile or lower --warmup"
            )
    if offsets is not None:
        measured = offsets[units_warm:]
        span = (float(measured[-1]) - float(measured[0])) / 1e9 if len(measured) > 1 else 0.0
        traffic["offered_req_s"] = (len(measured) - 1) / span if span > 0 else None
        traffic["offered_span_s"] = span
        traffic["unit"] = "conversation" if workload.multi_turn else "request"
    nproc = client.processes or auto_processes(level, workload.osl, client.resolved_transport)
    if closed:
        nproc = min(nproc, int(level.value))
    if total is not None:
        nproc = min(nproc, total)
    if level.max_concurrency is not None:
        nproc = min(nproc, level.max_concurrency)
    nproc = max(1, nproc)
    run_meta["processes"] = nproc
    concurrency = int(level.value) if closed else 0
    slots = split_concurrency(concurrency, nproc) if closed else [0] * nproc
    caps = (
        split_concurrency(level.max_concurrency, nproc)
        if level.max_concurrency is not None
        else [None] * nproc
    )
    rate = 0.0 if closed else float(traffic.get("offered_req_s") or level.value)
    per_worker_rate = rate / nproc
    plans = [
        _Plan(
            worker=w,
            jobs=JobSpec(
                settings=client,
                workload=workload,
                length_model=lm,
                start=w,
                step=nproc,
                stop=total,
                warmup=units_warm,
                offsets=None if offsets is None else offsets[w::nproc],
                low_water=max(32, 2 * slots[w], math.ceil(2 * per_worker_rate)),
            ),
            closed=closed,
            slots=slots[w],
            max_connections=slots[w] if closed else caps[w],
            stall_ns=int(th.max_loop_lag_p99_ms * 1e6),
            defer_bytes=0 if early_stop is not None else defer_bytes,
            cap=caps[w],
        )
        for w in range(nproc)
    ]
    run_meta["traffic"] = traffic
    measuring_since: list[float] = []
    draining: list[bool] = []

    def report(done: int, failed: int, warm_done: int) -> None:
        if progress is None:
            return
        now = time.monotonic()
        elapsed = now - started
        if warm_done < warmup and done == 0:
            progress(Progress(warm_done, warmup, 0, elapsed, True, "warm-up", left_s()))
            return
        if not measuring_since:
            measuring_since.append(now)
        phase: Phase = "measuring"
        if draining or (duration_s is not None and now - measuring_since[0] > duration_s):
            phase = "draining"
        progress(Progress(done, requests or 0, failed, elapsed, False, phase, left_s()))

    stopped: list[str] = []

    def watch(records: Sequence[RequestRecord]) -> bool:
        """Ask the early-stop callback; True when the level should drain now."""
        if early_stop is None or stopped:
            return False
        reason = early_stop(records)
        if reason:
            stopped.append(reason)
            draining.append(True)
            return True
        return False

    limits = _Limits(*_duration_ns(duration_s, grace_s), level_end_ns)
    if nproc == 1:
        results = await _run_inprocess(plans[0], limits, report, watch if early_stop else None)
    else:
        results = await _run_processes(plans, limits, report, watch if early_stop else None)
    if stopped:
        run_meta["early_stop"] = {"reason": stopped[0]}
    if isinstance(results, _Interrupted):
        run = _assemble(
            level, results.results, warmup, {**run_meta, "interrupted": True}, th, nproc
        )
        raise LoadInterrupted(
            f"load interrupted after {len(run.records)} measured requests", run=run
        )
    if any(r.hit_level_bound for r in results):
        measured = sum(len(r.records) for r in results)
        run_meta["level_timeout"] = {
            "phase": "measuring" if measured else "warm-up",
            "bound_s": level_timeout_s,
            "warmup_done": sum(r.warmup_done for r in results),
        }
    return _assemble(level, results, warmup, run_meta, th, nproc)


@dataclass(slots=True)
class _Interrupted:
    results: list[_WorkerResult]


@dataclass(frozen=True, slots=True)
class _Limits:
    """The time bounds every worker of a level shares (nanoseconds; ``level_end_ns`` is
    absolute on the shared monotonic clock)."""

    duration_ns: int | None
    grace_ns: int
    level_end_ns: int | None

    def bound(self) -> _Bound:
        return _Bound(self.duration_ns, self.grace_ns, self.level_end_ns)


def _duration_ns(duration_s: float | None, grace_s: float) -> tuple[int | None, int]:
    return (None if duration_s is None else int(duration_s * 1e9)), int(grace_s * 1e9)


async def _run_inprocess(
    plan: _Plan,
    limits: _Limits,
    report: Callable[[int, int, int], None],
    watch: Callable[[Sequence[RequestRecord]], bool] | None,
) -> list[_WorkerResult] | _Interrupted:
    stop = asyncio.Event()
    counter = _Counter()
    source = JobSource(plan.jobs)
    source.prefill()
    transport = make_transport(plan.settings, plan.max_connections)
    t0 = perf_counter_ns() + 1_000_000
    bound = limits.bound()
    seen: list[RequestRecord] = []

    async def reporter() -> None:
        checked = 0
        last = time.monotonic()
        while True:
            await asyncio.sleep(_PROGRESS_S)
            report(counter.done, counter.failed, counter.warm_done)
            now = time.monotonic()
            if watch is not None and len(seen) > checked and now - last >= _EARLY_STOP_EVERY_S:
                checked, last = len(seen), now
                if watch(seen):
                    bound.drain_now()

    rep = asyncio.ensure_future(reporter())
    on_record = seen.append if watch is not None else None
    task = asyncio.ensure_future(
        _drive(plan, source, transport, t0, bound, stop, counter, on_record)
    )
    try:
        res = await asyncio.shield(task)
    except asyncio.CancelledError:
        stop.set()
        res = await task
        return _Interrupted([res])
    finally:
        rep.cancel()
    report(len(res.records), sum(not r.ok for r in res.records), counter.warm_done)
    return [res]


def _spawn_worker(plan: _Plan) -> tuple[subprocess.Popen[bytes], Connection]:
    """Start one worker as ``python -m pytest_llmslo.load.worker`` on a socketpair.

    A plain subprocess rather than ``multiprocessing``: spawn would re-import the caller's
    ``__main__`` (breaking any script without a main guard) and fork is unsafe in a
    process that runs threads or an event loop.
    """
    parent_sock, child_sock = socket.socketpair()
    fd = child_sock.fileno()
    env = dict(os.environ)
    # The child must import this very package, wherever it was imported from.
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_llmslo.load.worker", str(fd)],
            pass_fds=(fd,),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=False,
        )
    finally:
        child_sock.close()
    conn = Connection(parent_sock.detach())
    conn.send(plan)
    return proc, conn


async def _run_processes(
    plans: list[_Plan],
    limits: _Limits,
    report: Callable[[int, int, int], None],
    watch: Callable[[Sequence[RequestRecord]], bool] | None,
) -> list[_WorkerResult] | _Interrupted:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    conns: list[Connection] = []
    procs: list[subprocess.Popen[bytes]] = []

    def reader(conn: Connection, worker: int) -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError) as exc:
                loop.call_soon_threadsafe(inbox.put_nowait, ("eof", worker, repr(exc)))
                return
            loop.call_soon_threadsafe(inbox.put_nowait, msg)
            if msg[0] in ("result", "error"):
                return

    n = len(plans)
    results: dict[int, _WorkerResult] = {}
    stats = {p.worker: (0, 0, 0) for p in plans}
    interrupted = False
    decoded: list[RequestRecord] = []
    # The workers' finished exchanges, decoded here: past the budget during the run (or
    # all of them at once with early stop, which needs the values), the rest at the end.
    backlog = Backlog(
        budget=sum(p.defer_bytes for p in plans),
        on_record=decoded.append if watch is not None else None,
    )
    drained = False
    checked = 0
    last_check = time.monotonic()

    def handle(msg: tuple[Any, ...]) -> None:
        if msg[0] == "raw":
            for item in msg[2]:
                backlog.add_packed(item, msg[1])
        elif msg[0] == "result":
            results[msg[1].worker] = msg[1]

    async def decoder() -> None:
        nonlocal drained, checked, last_check
        while True:
            if backlog.over_budget:
                backlog.decode_slice()
                await asyncio.sleep(0)
                continue
            now = time.monotonic()
            ready_to_check = now - last_check >= _EARLY_STOP_EVERY_S
            if watch is not None and not drained and ready_to_check and len(decoded) > checked:
                checked, last_check = len(decoded), now
                if watch(decoded):
                    drained = True
                    for c in conns:
                        with contextlib.suppress(Exception):
                            c.send(("drain",))
            await asyncio.sleep(0.01)

    async def next_msg(timeout: float | None) -> tuple[Any, ...]:
        msg = await asyncio.wait_for(inbox.get(), timeout)
        if msg[0] == "error":
            raise LoadError(f"a load worker process failed:\n{msg[1]}")
        if msg[0] == "eof":
            code = procs[msg[1]].poll() if msg[1] < len(procs) else None
            raise LoadError(
                f"load worker {msg[1]} exited before sending its results "
                f"(exit status {code}, {msg[2]})"
            )
        return msg

    try:
        # Start all workers at once; each builds its requests before it says ready.
        started = await asyncio.gather(
            *(loop.run_in_executor(None, _spawn_worker, plan) for plan in plans),
            return_exceptions=True,
        )
        for item in started:
            if isinstance(item, BaseException):
                continue
            procs.append(item[0])
            conns.append(item[1])
        errors = [x for x in started if isinstance(x, BaseException)]
        if errors:
            raise LoadError(f"cannot start a load worker process: {errors[0]!r}")
        for plan, conn in zip(plans, conns, strict=True):
            threading.Thread(target=reader, args=(conn, plan.worker), daemon=True).start()
        ready = 0
        while ready < n:
            msg = await next_msg(_READY_TIMEOUT_S)
            if msg[0] == "ready":
                ready += 1
        t0 = perf_counter_ns() + _START_MARGIN_NS
        for c in conns:
            c.send(("go", t0, limits.duration_ns, limits.grace_ns, limits.level_end_ns))
        last = 0.0
        decoding = loop.create_task(decoder())
        try:
            while len(results) < n:
                try:
                    msg = await next_msg(None)
                except asyncio.CancelledError:
                    interrupted = True
                    break
                if msg[0] == "progress":
                    _, w, done, failed, warm = msg
                    stats[w] = (done, failed, warm)
                    now = time.monotonic()
                    if now - last >= _PROGRESS_S:
                        last = now
                        report(*(sum(s[i] for s in stats.values()) for i in range(3)))
                else:
                    handle(msg)
            if interrupted:
                for c in conns:
                    with contextlib.suppress(Exception):
                        c.send(("stop",))
                with contextlib.suppress(asyncio.TimeoutError, TimeoutError, LoadError):
                    t_end = time.monotonic() + _RESULT_TIMEOUT_S
                    while len(results) < n:
                        handle(await next_msg(max(t_end - time.monotonic(), 0.01)))
        finally:
            decoding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await decoding
        d0 = time.process_time()
        backlog.drain()
        after_s = time.process_time() - d0
        by_worker: dict[int, list[RequestRecord]] = {}
        for rec in backlog.records:
            by_worker.setdefault(rec.worker, []).append(rec)
        for w, res in results.items():
            res.records = by_worker.get(w, [])
            # What the parent decoded is each worker's share of the decoding.
            res.decode_s = after_s / max(len(results), 1)
            res.decode_run_s = backlog.decode_cpu_ns / 1e9 / max(len(results), 1)
            res.longest_slice_ms = backlog.longest_slice_ns / 1e6
        if interrupted:
            return _Interrupted(list(results.values()))
        # Exact now that the records are decoded (during the run, in-stream errors were
        # not yet known).
        recs = backlog.records
        report(len(recs), sum(not r.ok for r in recs), sum(r.warmup_done for r in results.values()))
        return [results[w] for w in sorted(results)]
    finally:
        for c in conns:
            with contextlib.suppress(Exception):
                c.send(("stop",))
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for c in conns:
            with contextlib.suppress(Exception):
                c.close()


def run_load_sync(
    client: ClientSettings,
    workload: WorkloadSpec,
    level: LoadLevel,
    *,
    requests: int | None,
    warmup: int = 200,
    duration_s: float | None = None,
    grace_s: float = 30.0,
    level_timeout_s: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    meta: Mapping[str, Any] | None = None,
    thresholds: HealthThresholds | None = None,
    early_stop: EarlyStop | None = None,
) -> Run:
    """``run_load`` on its own event loop, for synchronous callers (fixtures, scripts).

    Ctrl-C and SIGTERM cancel the load cleanly (``LoadInterrupted`` with the partial run,
    its ``signal`` naming which); a second one while the load is being cut is noted (the
    partial run is still kept), a third interrupts at once. Called from a thread
    that already runs a loop, the load runs on a helper thread.
    """
    kwargs: dict[str, Any] = {
        "requests": requests,
        "warmup": warmup,
        "duration_s": duration_s,
        "grace_s": grace_s,
        "level_timeout_s": level_timeout_s,
        "progress": progress,
        "meta": meta,
        "thresholds": thresholds,
        "early_stop": early_stop,
    }
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_new_loop(client, workload, level, kwargs)
    out: queue.Queue[tuple[str, Any]] = queue.Queue()

    def target() -> None:
        try:
            out.put(("ok", _run_on_new_loop(client, workload, level, kwargs)))
        except BaseException as exc:  # handed to the caller's thread
            out.put(("err", exc))

    t = threading.Thread(target=target, name="llmslo-load", daemon=True)
    t.start()
    t.join()
    kind, value = out.get()
    if kind == "err":
        raise value
    if not isinstance(value, Run):
        raise LoadError("the load thread returned no run")
    return value


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _run_on_new_loop(
    client: ClientSettings, workload: WorkloadSpec, level: LoadLevel, kwargs: dict[str, Any]
) -> Run:
    loop = new_event_loop(client.event_loop)
    main = loop.create_task(run_load(client, workload, level, **kwargs))
    old: dict[int, Any] = {}
    received: list[str] = []
    if threading.current_thread() is threading.main_thread():

        def on_signal(signum: int, frame: Any) -> None:
            received.append(signal.Signals(signum).name)
            if len(received) == 1:
                loop.call_soon_threadsafe(main.cancel)
                return
            # A second signal while the load is being cut is noted: raised in the middle
            # of the cut, it would lose the partial run (collecting it is bounded by
            # _RESULT_TIMEOUT_S). A third gets the handlers of before at once.
            if len(received) >= 3:
                for sig, handler in old.items():
                    signal.signal(sig, handler)
                previous = old.get(signum)
                if callable(previous):
                    previous(signum, frame)
                elif previous == signal.SIG_DFL:
                    os.kill(os.getpid(), signum)

        for sig in _STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                old[sig] = signal.signal(sig, on_signal)
    try:
        return loop.run_until_complete(main)
    except LoadInterrupted as exc:
        exc.signal = received[0] if received else None
        raise
    except asyncio.CancelledError as exc:
        err = LoadInterrupted("load cancelled")
        err.signal = received[0] if received else None
        raise err from exc
    finally:
        for sig, handler in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, handler)
        _close_loop(loop)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending, then close: a loop closed with pending tasks prints
    "Task was destroyed but it is pending" and "Event loop is closed" tracebacks later."""
    with contextlib.suppress(Exception):
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
