"""One worker's sends: a closed loop, an open loop, and the conversations of a multi-turn
workload within either; shared by the in-process path and the worker processes.

- ``Sender`` sends one request and accounts for it (measured, warm-up, or cut while in
  flight), under an open loop's cap when it has one, and walks a conversation's turns;
- ``closed_loop``: n slots, each sending its next request when its previous one ended,
  then cooling down (requests that are not measured keep the level's concurrency until the
  worker's last measured request ends);
- ``open_loop``: a scheduler sends each request at its absolute time ``t0 + offset``;
- ``drive`` runs one of them between ``t0`` and the bounds, with the loop's own health
  watched (lag ticker), young garbage collected and the backlog decoded in slices, and
  cuts what is still in flight at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

from ..evals import AnswerBook
from ..records import RequestRecord
from ..recordstore import RecordStore
from .backlog import Backlog
from .client import RawExchange, Transport
from .jobsource import Job, JobSource
from .levelplan import Bound, WorkerPlan
from .sse import stream_text
from .workload import Conversation

__all__ = ["Counter", "Driver", "WorkerResult", "sleep_until"]

_TICK_NS = 10_000_000  # event-loop lag ticker period
_YOUNG_GC_NS = 200_000_000  # how often the young generations are collected during a run
# The cut's bound: a request in flight ends within one step of its cancellation (its record
# is kept at once); a transport that does not close in this time is left to the loop's end.
_CUT_S = 2.0

#: Sends one job at its scheduled time, with its own headers.
Send = Callable[[Job, int, "Mapping[str, str] | None"], Awaitable[RawExchange]]


@dataclass(slots=True)
class WorkerResult:
    """What one worker measured: its records and the measures of its own health."""

    worker: int
    #: A ``RecordStore`` (or its view of one worker's records, ``RecordView``); a list
    #: where a test builds a result by hand.
    records: Sequence[RequestRecord] = field(default_factory=list)
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
    #: The scored answers of the eval items this worker's records carried (None: no eval).
    answers: AnswerBook | None = None


class Counter:
    """Requests done so far, for progress reports."""

    __slots__ = ("done", "failed", "warm_done")

    def __init__(self) -> None:
        self.done = 0
        self.failed = 0
        self.warm_done = 0


async def sleep_until(t_ns: int) -> None:
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
        await sleep_until(nxt)
        now = perf_counter_ns()
        lag = max(now - nxt, 0)
        samples.append(lag)
        if lag > stall_ns:
            for _ in range(2):
                await asyncio.sleep(0)
            stalls.append((nxt, perf_counter_ns()))
        nxt = now + _TICK_NS


async def _housekeeping(backlog: Backlog, source: JobSource) -> None:
    """Decoding past the budget, building jobs ahead of need and collecting young
    garbage, a slice at a time."""
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


async def wait_bounded(
    tasks: set[asyncio.Task[Any]], waiter: asyncio.Future[Any], bound: Bound
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
    tasks: set[asyncio.Task[Any]], waiter: asyncio.Future[Any], timeout: float | None
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
        done, _ = await asyncio.wait(
            [*pending, waiter], timeout=left, return_when=asyncio.FIRST_COMPLETED
        )
        if waiter in done:
            return
        pending = {t for t in pending if not t.done()}  # what asyncio.wait left pending
        # A slot that raised (a bug, not a request failure) must not be swallowed.
        for t in done:
            if t is not waiter and not t.cancelled():
                exc = t.exception()
                if exc is not None:
                    raise exc


def _failed(raw: RawExchange) -> bool:
    return raw.kind is not None or not 200 <= raw.status < 300


class Sender:
    """Sends one worker's requests and accounts for each: a measured one is counted and
    delivered (to the backlog, or shipped to the parent), a warm-up one only counted, and
    a measured one cut while in flight is delivered as a ``cancelled`` failure."""

    __slots__ = (
        "bound",
        "cap",
        "counter",
        "cut_reason",
        "deliver",
        "res",
        "source",
        "stop",
        "transport",
    )

    def __init__(
        self,
        plan: WorkerPlan,
        driver: Driver,
        res: WorkerResult,
        deliver: Callable[[Job, int, RawExchange], None],
    ) -> None:
        self.source = driver.source
        self.transport = driver.transport
        self.bound = driver.bound
        self.stop = driver.stop
        self.counter = driver.counter
        self.res = res
        self.deliver = deliver
        self.cap = asyncio.Semaphore(plan.cap) if plan.cap else None
        self.cut_reason = "cut by the duration bound: still running after the grace period"

    def cut(self, job: Job, scheduled: int, raw: RawExchange) -> None:
        """Record a measured request cut while in flight, as a ``cancelled`` failure."""
        if job.warmup or not raw.sent_ns:
            return
        raw.end_ns = perf_counter_ns()
        raw.kind, raw.error = "cancelled", self.cut_reason
        self.res.cancelled += 1
        self.counter.done += 1
        self.counter.failed += 1
        self.res.schedule_lag_ns.append(raw.sent_ns - scheduled)
        self.deliver(job, scheduled, raw)

    async def one(
        self, job: Job, scheduled: int, headers: Mapping[str, str] | None = None
    ) -> RawExchange:
        raw = RawExchange()
        res = self.res
        try:
            await self.transport.send(job.body, raw, headers)
        except asyncio.CancelledError:
            if job.warmup and raw.sent_ns:
                res.side_flight.append((raw.sent_ns, perf_counter_ns()))
            self.cut(job, scheduled, raw)
            raise
        if job.warmup:
            self.counter.warm_done += 1
            res.warmup_done += 1
            res.side_flight.append((raw.sent_ns, raw.end_ns or perf_counter_ns()))
            return raw
        self.counter.done += 1
        if _failed(raw):
            self.counter.failed += 1
        res.schedule_lag_ns.append(raw.sent_ns - scheduled)
        self.deliver(job, scheduled, raw)
        return raw

    async def gated(
        self, job: Job, at: int, headers: Mapping[str, str] | None = None
    ) -> RawExchange:
        """An open loop's send under its cap on requests in flight: an arrival that finds
        the cap reached waits for a slot, and its scheduled time becomes the moment the
        slot opened (the wait is the cap's, reported apart, not the client's lag)."""
        cap = self.cap
        if cap is None:
            return await self.one(job, at, headers)
        if cap.locked():
            await cap.acquire()
            now = perf_counter_ns()
            if now > at:
                if not job.warmup:
                    res = self.res
                    res.cap_delayed += 1
                    res.cap_wait_ns += now - at
                    res.cap_wait_max_ns = max(res.cap_wait_max_ns, now - at)
                at = now
        else:
            await cap.acquire()
        try:
            return await self.one(job, at, headers)
        finally:
            cap.release()

    async def converse(self, conv: Conversation, warm: bool, at: int, send: Send) -> None:
        """The turns of one conversation, each after the think time that follows the end
        of the one before it; a failed turn ends the conversation (a user whose answer did
        not come does not go on), and so do the bounds."""
        source, bound, stop = self.source, self.bound, self.stop
        headers = source.session_headers(conv)
        history: list[tuple[str, str]] = []
        isl = 0
        if not warm:
            self.res.sessions_started += 1
        for k, turn in enumerate(conv.turns):
            if k:
                at = perf_counter_ns() + int(conv.think_s[k] * 1e9)
                if stop.is_set() or bound.expired(at):
                    return
                await sleep_until(at)
                if stop.is_set() or bound.expired(at):
                    return
            isl += turn.isl
            job = source.turn_job(conv, k, history, warm, isl)
            if not warm:
                bound.start(at)
            raw = await send(job, at, headers)
            if _failed(raw):
                return
            reply = stream_text(raw.pieces)
            history.append((turn.text, reply))
            isl += max(1, len(raw.times)) if not reply else len(reply.split())
        if not warm:
            self.res.sessions_finished += 1


class _ClosedLoop:
    """n slots; a slot sends its next request (or conversation) as soon as its previous
    one ended, that moment being the next one's scheduled time.

    Cool-down: a slot whose measured requests are over keeps sending requests that are
    not measured until the worker's last measured one ends, so every measured request runs
    at the level's concurrency to its last token. Without it the last wave streams in a
    shrinking batch, faster than the engine serves c streams (a 1.3-wave level at c48 read
    17 % above the engine's throughput)."""

    def __init__(self, sender: Sender, slots: int, multi: bool, t0_ns: int) -> None:
        self.s = sender
        self.multi = multi
        self.t0_ns = t0_ns
        self.slots_measuring = max(slots, 1)
        self.measuring = 0
        self.cooled = asyncio.Event()
        self.cooling: set[asyncio.Future[None]] = set()

    def _measured_over(self) -> None:
        if self.slots_measuring == 0 and self.measuring == 0 and not self.cooled.is_set():
            self.cooled.set()
            for f in self.cooling:
                f.cancel()

    async def measured(
        self, job: Job, scheduled: int, headers: Mapping[str, str] | None = None
    ) -> RawExchange:
        if job.warmup:
            return await self.s.one(job, scheduled, headers)
        self.measuring += 1
        try:
            return await self.s.one(job, scheduled, headers)
        finally:
            self.measuring -= 1
            self._measured_over()

    async def slot(self) -> None:
        s = self.s
        scheduled = self.t0_ns
        try:
            while not s.stop.is_set() and not s.bound.expired(scheduled):
                if self.multi:
                    got = s.source.next_conversation()
                    if got is None:
                        break
                    await s.converse(got[0], got[1], scheduled, self.measured)
                else:
                    job = s.source.next()
                    if job is None:
                        break
                    if not job.warmup:
                        s.bound.start(scheduled)
                    raw = await self.measured(job, scheduled)
                    # Due again when the response's last byte arrived: the lag of the next
                    # send is the client's turnaround (health.py).
                    scheduled = raw.end_ns or perf_counter_ns()
                    continue
                scheduled = perf_counter_ns()
        finally:
            self.slots_measuring -= 1
            self._measured_over()
        await self._cool_down()

    async def _cool_down(self) -> None:
        s = self.s
        while not self.cooled.is_set() and not s.stop.is_set():
            end = s.bound.drain_end_ns()
            if end is not None and perf_counter_ns() >= end:
                return
            spare = RawExchange()
            f = asyncio.ensure_future(s.transport.send(s.source.spare().body, spare))
            self.cooling.add(f)
            s.res.cooldown_sent += 1
            try:
                await f
            except asyncio.CancelledError:
                if self.cooled.is_set():
                    return  # the last measured request ended: cool-down is over
                raise  # this slot itself was cancelled
            finally:
                self.cooling.discard(f)
                if spare.sent_ns:
                    s.res.side_flight.append((spare.sent_ns, spare.end_ns or perf_counter_ns()))


async def closed_loop(
    sender: Sender, plan: WorkerPlan, t0_ns: int, tasks: set[asyncio.Task[Any]]
) -> None:
    """Run ``plan``'s slots (added to ``tasks``) until they end, the stop event fires or
    the bounds' drain ends."""
    loop = _ClosedLoop(sender, plan.slots, plan.jobs.workload.multi_turn, t0_ns)
    tasks.update(asyncio.ensure_future(loop.slot()) for _ in range(max(plan.slots, 1)))
    waiter: asyncio.Future[Any] = asyncio.ensure_future(sender.stop.wait())
    await wait_bounded(tasks, waiter, sender.bound)
    waiter.cancel()


async def _schedule(sender: Sender, multi: bool, t0_ns: int, tasks: set[asyncio.Task[Any]]) -> None:
    """Send each request (or conversation) at ``t0_ns`` + its offset, as a task of its own
    in ``tasks``, until the jobs or the bounds end."""
    source, bound, stop = sender.source, sender.bound, sender.stop
    while True:
        if multi:
            got = source.next_conversation()
            if got is None:
                return
            conv, warm, offset = got
            job = None
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
        await sleep_until(at)
        if stop.is_set() or bound.expired(at):
            return
        t: asyncio.Task[Any]
        if job is None:
            t = asyncio.ensure_future(sender.converse(conv, warm, at, sender.gated))
        else:
            t = asyncio.ensure_future(sender.gated(job, at))
        tasks.add(t)
        t.add_done_callback(tasks.discard)


async def open_loop(
    sender: Sender, plan: WorkerPlan, t0_ns: int, tasks: set[asyncio.Task[Any]]
) -> None:
    """Send ``plan``'s requests at their absolute times, then wait for those in flight
    until they end, the stop event fires or the bounds' drain ends."""
    bound, stop = sender.bound, sender.stop
    sched = asyncio.ensure_future(_schedule(sender, plan.jobs.workload.multi_turn, t0_ns, tasks))
    waiter: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    await wait_bounded({sched}, waiter, bound)
    while not stop.is_set() and not sched.cancelled() and tasks:
        # A conversation's task adds no new task; wait for what is in flight.
        await wait_bounded(set(tasks), waiter, bound)
        end = bound.drain_end_ns()
        if end is not None and perf_counter_ns() >= end:
            break
    sched.cancel()
    waiter.cancel()


class Driver:
    """One worker's run: its jobs, its transport, its bounds, the stop event and the
    counters the progress reports read.

    The transport is made before ``t0_ns`` is fixed: an httpx client takes tens of
    milliseconds to set up, which would otherwise delay the first requests past their
    scheduled time."""

    def __init__(
        self,
        plan: WorkerPlan,
        source: JobSource,
        transport: Transport,
        bound: Bound,
        stop: asyncio.Event,
        counter: Counter,
    ) -> None:
        self.plan = plan
        self.source = source
        self.transport = transport
        self.bound = bound
        self.stop = stop
        self.counter = counter

    async def run(
        self,
        t0_ns: int,
        on_record: Callable[[RequestRecord], None] | None = None,
        ship: Callable[[Job, int, RawExchange], None] | None = None,
        store: RecordStore | None = None,
    ) -> WorkerResult:
        """Send the jobs from ``t0_ns`` on. ``ship`` takes each finished exchange instead
        of the local backlog (a worker process hands them, undecoded, to the parent);
        ``on_record`` sees each record the local backlog decodes, into ``store`` (made
        before ``t0``: a new store moves the finished ones to their files)."""
        plan = self.plan
        res = WorkerResult(
            plan.worker,
            t0_ns=t0_ns,
            closed=plan.closed,
            slots=plan.slots,
            multi_turn=plan.jobs.workload.multi_turn,
        )
        res.kernel_stamps = self.transport.kernel_stamps
        loop = asyncio.get_running_loop()
        ticker = loop.create_task(_loop_ticker(res.loop_lag_ns, res.stalls, plan.stall_ns))
        if store is None:
            store = RecordStore(plan.records_memory)
        backlog = Backlog(
            plan.worker,
            plan.defer_bytes,
            on_record=on_record,
            store=store,
            answers=plan.jobs.workload.answer_book(),
        )
        keeper = loop.create_task(_housekeeping(backlog, self.source))
        sender = Sender(plan, self, res, ship or backlog.add)
        built_before = self.source.built
        tasks: set[asyncio.Task[Any]] = set()
        # A full collection walks every live object (tens of thousands of records and
        # responses by the end of a run) and held the loop for 50 ms at c=512: no full
        # collection runs during the run. What existed before it is frozen out of the
        # collector's sight, and housekeeping collects the young generations, which is
        # where nearly all garbage dies; the cycles that reach the old one wait for the
        # run's end.
        gc_was_enabled = gc.isenabled()
        gc.freeze()
        gc.disable()
        cpu0 = time.process_time()
        sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        wall0 = perf_counter_ns()
        try:
            await sleep_until(t0_ns)
            run = closed_loop if plan.closed else open_loop
            await run(sender, plan, t0_ns, tasks)
        finally:
            await self._cut(sender, tasks)
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
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self.transport.aclose(), _CUT_S)
            self._decode(res, backlog, built_before)
        return res

    async def _cut(self, sender: Sender, tasks: set[asyncio.Task[Any]]) -> None:
        """Cancel what is still in flight, saying why in each cut record."""
        bound = self.bound
        if self.stop.is_set():
            sender.cut_reason = "cut by an interrupt of the run"
        elif bound.level_end_ns is not None and perf_counter_ns() >= bound.level_end_ns:
            sender.res.hit_level_bound = True
            sender.cut_reason = "cut by the level's time bound (--level-timeout)"
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            # Every task still pending is inside a request (a closed-loop slot only waits
            # in one()): one() records each measured one as cancelled, when the
            # cancellation reaches it; a task that holds on past the bound is not waited for.
            await asyncio.wait(pending, timeout=_CUT_S)

    def _decode(self, res: WorkerResult, backlog: Backlog, built_before: int) -> None:
        res.decode_run_s = backlog.decode_cpu_ns / 1e9
        res.longest_slice_ms = backlog.longest_slice_ns / 1e6
        res.built_during_run = self.source.built - built_before
        d0 = time.process_time()
        res.records = backlog.drain()
        res.answers = backlog.answers
        res.decode_s = time.process_time() - d0
