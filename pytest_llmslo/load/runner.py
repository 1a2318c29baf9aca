"""Running a load: closed or open loop, in one or several processes, measured.

``run_load`` builds the prompts and request bodies up front (so nothing but sending and
timestamping happens during the run), then drives them:

- closed loop (``LoadLevel.concurrency(n)``): n slots, each sends its next request as soon
  as its previous one ended; that moment is the request's scheduled time;
- open loop (``LoadLevel.rate(r, "constant"|"poisson", seed)``): request i is sent at the
  absolute time ``t0 + offsets[i]`` (``schedule.py``), whatever happened before it.

Several processes: above a modest load one Python event loop cannot read hundreds of
streams without its own lag showing up as latency, so the load is split over worker
processes (``python -m pytest_llmslo.load.worker``), each with its own event loop and
connection pool. They start, report ready, and all begin at one absolute ``t0``
(``perf_counter_ns`` is ``CLOCK_MONOTONIC``, shared by every process on Linux, so their
timestamps are comparable); their records are merged. ``ClientSettings.processes``
overrides the automatic choice (``auto_processes``).

Phases: ``calibrating`` (a few probes that fit prompt lengths to the server), ``warm-up``
(the first ``warmup`` requests of the sequence, sent and discarded), ``measuring`` and,
after a duration bound, ``draining``; the progress callback names the phase.

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
the level in progress is cut and kept; a second signal interrupts at once.

The client checks itself (``ClientHealth``): schedule lag (sent − scheduled), event-loop
lag (a ticker every 10 ms, how late it wakes) and CPU (``time.process_time`` per process
over the run's wall time). ``HealthThresholds`` says when the client, not the engine, was
the bottleneck; the run is then ``valid=False`` with the reasons.
"""

from __future__ import annotations

import asyncio
import contextlib
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
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter_ns
from typing import Any, Literal

import numpy as np

from .. import __version__
from ..errors import LoadError, LoadInterrupted
from ..records import ClientHealth, LoadLevel, RequestRecord, Run
from .client import (
    ClientSettings,
    RawExchange,
    build_record,
    make_transport,
    new_event_loop,
    request_body,
)
from .schedule import arrival_offsets_ns, split_concurrency, split_round_robin
from .workload import (
    LengthModel,
    WorkloadSpec,
    build_prompts,
    calibration_prompts,
    fit_length_model,
    overhead_prompts,
)

_DEFER_BYTES = 128 * 1024 * 1024  # raw response bytes a worker holds before decoding
_TICK_NS = 10_000_000  # event-loop lag ticker period
_PROGRESS_S = 0.25
_START_MARGIN_NS = 50_000_000  # t0 this far after every worker said ready
_READY_TIMEOUT_S = 120.0
_RESULT_TIMEOUT_S = 60.0  # after cancelling, how long to wait for workers' partial results


Phase = Literal["calibrating", "warm-up", "measuring", "draining"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report: ``done`` of ``total`` requests of the current ``phase``
    (``calibrating``: probes; ``draining``: the duration bound passed, the requests in
    flight may finish). ``left_s`` is the time to the level's bound, when it has one."""

    done: int
    total: int
    failed: int
    elapsed_s: float
    warmup: bool
    phase: Phase = "measuring"
    left_s: float | None = None


@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """When a run is invalid because the client was the bottleneck.

    - schedule lag P99 above ``max_schedule_lag_p99_ms``: requests left later than planned,
      so an open loop's rate and a closed loop's concurrency were not what was asked;
    - event-loop lag P99 above ``max_loop_lag_p99_ms``: callbacks (and so chunk timestamps)
      ran that late, which would show up as TTFT and ITL;
    - CPU above ``max_cpu_util`` of a core in any client process: the loop had no slack.
    """

    max_schedule_lag_p99_ms: float = 10.0
    max_loop_lag_p99_ms: float = 10.0
    max_cpu_util: float = 0.9


@dataclass(slots=True)
class _Job:
    index: int
    body: bytes
    isl: int
    osl: int
    warmup: bool
    offset_ns: int = 0


@dataclass(slots=True)
class _Plan:
    worker: int
    settings: ClientSettings
    jobs: list[_Job]
    closed: bool
    slots: int
    max_connections: int | None


@dataclass(slots=True)
class _WorkerResult:
    worker: int
    records: list[RequestRecord] = field(default_factory=list)
    warmup_done: int = 0
    cancelled: int = 0
    schedule_lag_ns: list[int] = field(default_factory=list)
    loop_lag_ns: list[int] = field(default_factory=list)
    cpu_s: float = 0.0
    sys_s: float = 0.0
    decode_s: float = 0.0
    wall_s: float = 0.0
    hit_level_bound: bool = False


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


async def _loop_ticker(samples: list[int]) -> None:
    nxt = perf_counter_ns() + _TICK_NS
    while True:
        await _sleep_until(nxt)
        now = perf_counter_ns()
        samples.append(max(now - nxt, 0))
        nxt = now + _TICK_NS


@dataclass(slots=True)
class _Bound:
    """The time bounds of one worker. The duration's clock starts at the first measured
    send; ``level_end_ns`` is the level's absolute wall-clock bound (all phases)."""

    duration_ns: int | None
    grace_ns: int
    level_end_ns: int | None = None
    send_until_ns: int | None = None

    def start(self, now_ns: int) -> None:
        if self.duration_ns is not None and self.send_until_ns is None:
            self.send_until_ns = now_ns + self.duration_ns

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

    @property
    def waiting_to_start(self) -> bool:
        """The duration's clock has not started (warm-up): its end is still unknown."""
        return self.duration_ns is not None and self.send_until_ns is None


async def _wait_bounded(
    tasks: set[asyncio.Task[None]], waiter: asyncio.Future[Any], bound: _Bound
) -> None:
    """Wait for ``tasks`` until they are done, the stop event fires, or the bound's drain
    ends. Before the duration's clock starts (warm-up) its end is unknown: look again
    often."""
    while any(not t.done() for t in tasks) and not waiter.done():
        end = bound.drain_end_ns()
        if end is None:
            if not bound.waiting_to_start:
                await _wait_tasks(tasks, waiter, None)
                return
            await _wait_tasks(tasks, waiter, 0.25)
            continue
        left = (end - perf_counter_ns()) / 1e9
        if left <= 0:
            return
        await _wait_tasks(tasks, waiter, min(left, 0.25) if bound.waiting_to_start else left)


async def _drive(
    plan: _Plan,
    t0_ns: int,
    bound: _Bound,
    stop: asyncio.Event,
    counter: _Counter,
) -> _WorkerResult:
    """Send one worker's jobs; shared by the in-process path and the worker processes."""
    res = _WorkerResult(plan.worker)
    transport = make_transport(plan.settings, plan.max_connections)
    ticker = asyncio.get_running_loop().create_task(_loop_ticker(res.loop_lag_ns))
    lags = res.schedule_lag_ns
    records = res.records

    # Decoding (SSE split, JSON) waits until the run is over so that it never competes
    # with reading other streams; past _DEFER_BYTES of raw bodies it runs at once.
    backlog: list[tuple[_Job, int, RawExchange]] = []
    backlog_bytes = 0

    def decode_backlog() -> None:
        nonlocal backlog_bytes
        for job, scheduled, raw in backlog:
            records.append(
                build_record(
                    job.index,
                    scheduled,
                    raw,
                    requested_prompt_tokens=job.isl,
                    requested_output_tokens=job.osl,
                    worker=plan.worker,
                )
            )
        backlog.clear()
        backlog_bytes = 0

    cut_reason = "cut by the duration bound: still running after the grace period"

    def cut(job: _Job, scheduled: int, raw: RawExchange) -> None:
        """Record a measured request cut while in flight, as a ``cancelled`` failure."""
        nonlocal backlog_bytes
        if job.warmup or not raw.sent_ns:
            return
        raw.end_ns = perf_counter_ns()
        raw.kind, raw.error = "cancelled", cut_reason
        res.cancelled += 1
        counter.done += 1
        counter.failed += 1
        lags.append(raw.sent_ns - scheduled)
        backlog.append((job, scheduled, raw))
        backlog_bytes += sum(map(len, raw.pieces))

    async def one(job: _Job, scheduled: int) -> None:
        nonlocal backlog_bytes
        raw = RawExchange()
        try:
            await transport.send(job.body, raw)
        except asyncio.CancelledError:
            cut(job, scheduled, raw)
            raise
        if job.warmup:
            counter.warm_done += 1
            res.warmup_done += 1
            return
        counter.done += 1
        if raw.kind is not None or not 200 <= raw.status < 300:
            counter.failed += 1
        lags.append(raw.sent_ns - scheduled)
        backlog.append((job, scheduled, raw))
        backlog_bytes += sum(map(len, raw.pieces))
        if backlog_bytes > _DEFER_BYTES:
            decode_backlog()

    jobs = plan.jobs
    tasks: set[asyncio.Task[None]] = set()
    cpu0 = time.process_time()
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    wall0 = perf_counter_ns()
    try:
        await _sleep_until(t0_ns)
        if plan.closed:
            it = iter(jobs)

            async def slot() -> None:
                scheduled = t0_ns
                for job in it:
                    if stop.is_set() or bound.expired(scheduled):
                        return
                    if not job.warmup:
                        bound.start(scheduled)
                    await one(job, scheduled)
                    scheduled = perf_counter_ns()

            tasks = {asyncio.ensure_future(slot()) for _ in range(max(plan.slots, 1))}
            waiter: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
            await _wait_bounded(tasks, waiter, bound)
            waiter.cancel()
        else:

            async def scheduler() -> None:
                for job in jobs:
                    at = t0_ns + job.offset_ns
                    if bound.expired(at):
                        return
                    if not job.warmup:
                        bound.start(at)
                    await _sleep_until(at)
                    if stop.is_set():
                        return
                    t = asyncio.ensure_future(one(job, at))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)

            sched = asyncio.ensure_future(scheduler())
            waiter = asyncio.ensure_future(stop.wait())
            await _wait_bounded({sched}, waiter, bound)
            if not stop.is_set() and not sched.cancelled() and tasks:
                await _wait_bounded(set(tasks), waiter, bound)
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
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        await transport.aclose()
        d0 = time.process_time()
        decode_backlog()
        res.decode_s = time.process_time() - d0
    return res


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


# -- worker processes ------------------------------------------------------------------


def worker_main(fd: int) -> None:
    """Entry point of one worker process (``python -m pytest_llmslo.load.worker FD``)."""
    # The parent turns Ctrl-C and SIGTERM into a "stop" message; a handler here would cut
    # requests before the parent could collect them (a CI runner signals the whole group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        plan = conn.recv()
        conn.send(("ready", plan.worker))
        msg = conn.recv()
        if msg[0] != "go":
            return
        _, t0_ns, duration_ns, grace_ns, level_end_ns = msg
        loop = new_event_loop(plan.settings.event_loop)
        try:
            res = loop.run_until_complete(
                _worker_async(conn, plan, t0_ns, _Bound(duration_ns, grace_ns, level_end_ns))
            )
        finally:
            loop.close()
        conn.send(("result", res))
    except Exception:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        with contextlib.suppress(Exception):
            conn.close()


async def _worker_async(conn: Any, plan: _Plan, t0_ns: int, bound: _Bound) -> Any:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    counter = _Counter()

    def control() -> None:
        # A blocking reader thread rather than loop.add_reader: uvloop makes a watched fd
        # non-blocking, and a large blocking send() on it (the results) would then break.
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = ("stop",)  # the parent went away
            if msg[0] == "stop":
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(stop.set)
                return

    threading.Thread(target=control, name="llmslo-control", daemon=True).start()

    async def report() -> None:
        while True:
            await asyncio.sleep(_PROGRESS_S)
            conn.send(("progress", plan.worker, counter.done, counter.failed, counter.warm_done))

    reporter = loop.create_task(report())
    try:
        return await _drive(plan, t0_ns, bound, stop, counter)
    finally:
        reporter.cancel()


# -- the public entry points -------------------------------------------------------------


async def _probe_prompt_tokens(
    client: ClientSettings, sizes: list[int], texts: list[str]
) -> tuple[list[int], list[int], list[str]]:
    """Send each probe text (``max_tokens=1``) and read the server's ``prompt_tokens``.
    Returns (sizes that got an answer, their prompt_tokens, errors of the others). The
    first probe without an answer ends the probing: a server that failed or stalled on one
    will not answer the next, and each try would cost a request deadline."""
    transport = make_transport(client, 1)
    sent: list[int] = []
    tokens: list[int] = []
    errors: list[str] = []
    try:
        for size, text in zip(sizes, texts, strict=True):
            raw = RawExchange()
            await transport.send(request_body(client, text, 1), raw)
            rec = build_record(-1, raw.sent_ns, raw)
            if rec.prompt_tokens:
                sent.append(size)
                tokens.append(rec.prompt_tokens)
            else:
                errors.append(rec.error or "no prompt_tokens in usage")
                break
    finally:
        await transport.aclose()
    return sent, tokens, errors


async def _calibrate(
    client: ClientSettings, workload: WorkloadSpec
) -> tuple[LengthModel, dict[str, Any]]:
    """Fit tokens-per-word to the server's reported prompt_tokens with a few probes."""
    sizes = sorted({max(1, workload.isl // 2), workload.isl, max(2, workload.isl * 3 // 2)})
    texts = calibration_prompts(workload, sizes)
    words, tokens, errors = await _probe_prompt_tokens(client, sizes, texts)
    if not words:
        return LengthModel(), {"fitted": False, "error": errors[0] if errors else "no probes"}
    lm = fit_length_model(words, tokens)
    return lm, {"fitted": True, "probe_words": words, "probe_tokens": tokens, **lm.to_dict()}


async def _measure_overhead(
    client: ClientSettings, workload: WorkloadSpec
) -> tuple[LengthModel, dict[str, Any]]:
    """With a tokenizer: the tokens the server adds around a prompt (chat template, BOS).

    Probes of exactly k tokens of the tokenizer are sent (``max_tokens=1``); the server's
    ``prompt_tokens`` minus k is the overhead. It must be one constant: otherwise the
    server does not count with this tokenizer, and no overhead is taken."""
    sizes = sorted({max(1, workload.isl // 2), workload.isl})
    texts = overhead_prompts(workload, sizes)
    local, server, errors = await _probe_prompt_tokens(client, sizes, texts)
    info: dict[str, Any] = {
        "method": "tokenizer overhead",
        "probe_tokens": local,
        "server_prompt_tokens": server,
    }
    if not local:
        info.update(fitted=False, error=errors[0] if errors else "no probes")
        return LengthModel(), info
    overheads = {t - k for k, t in zip(local, server, strict=True)}
    if len(overheads) != 1:
        info.update(
            fitted=False,
            error=(
                f"the server counted {server} prompt tokens for prompts of {local} tokens "
                "of the tokenizer: not a constant overhead, so the tokenizer is not the "
                "server's; prompt lengths follow the tokenizer alone"
            ),
        )
        return LengthModel(), info
    overhead = overheads.pop()
    info.update(fitted=True, overhead=overhead)
    return LengthModel(1.0, float(overhead)), info


def _health(results: list[_WorkerResult], th: HealthThresholds, nproc: int) -> ClientHealth:
    lags = np.array([x for r in results for x in r.schedule_lag_ns], dtype=float) / 1e6
    loop = np.array([x for r in results for x in r.loop_lag_ns], dtype=float) / 1e6
    cpu_s = sum(r.cpu_s for r in results)
    util = max((r.cpu_s / r.wall_s for r in results if r.wall_s > 0), default=0.0)
    s50 = float(np.percentile(lags, 50)) if lags.size else 0.0
    s99 = float(np.percentile(lags, 99)) if lags.size else 0.0
    smax = float(lags.max()) if lags.size else 0.0
    l99 = float(np.percentile(loop, 99)) if loop.size else 0.0
    lmax = float(loop.max()) if loop.size else 0.0
    reasons = []
    # Lag with a busy process is the client's own load; lag with an idle one means the
    # process did not get the CPU (other work on the machine), which is as fatal.
    cause = (
        "client overloaded"
        if util > 0.5
        else f"client process starved of CPU: busiest at {util:.0%} of a core"
    )
    if s99 > th.max_schedule_lag_p99_ms:
        reasons.append(
            f"schedule lag P99 {s99:.1f} ms > {th.max_schedule_lag_p99_ms:g} ms: requests "
            f"left later than scheduled ({cause})"
        )
    if l99 > th.max_loop_lag_p99_ms:
        reasons.append(
            f"event-loop lag P99 {l99:.1f} ms > {th.max_loop_lag_p99_ms:g} ms: timestamps "
            f"were taken late ({cause})"
        )
    if util > th.max_cpu_util:
        reasons.append(
            f"client CPU {util:.0%} of a core > {th.max_cpu_util:.0%} in one process: the "
            "client was saturated (use more processes)"
        )
    return ClientHealth(
        schedule_lag_p50_ms=s50,
        schedule_lag_p99_ms=s99,
        schedule_lag_max_ms=smax,
        loop_lag_p99_ms=l99,
        loop_lag_max_ms=lmax,
        cpu_s=cpu_s,
        cpu_util=util,
        processes=nproc,
        valid=not reasons,
        reasons=tuple(reasons),
    )


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
    # Kernel time is most of a socket read's cost; the split says how much is left to win.
    meta["client_cpu"] = {
        "cpu_s": sum(r.cpu_s for r in results),
        "sys_s": sum(r.sys_s for r in results),
        # SSE split and JSON decoding after the run (not in cpu_s: off the hot path).
        "decode_s": sum(r.decode_s for r in results),
        "per_process_util": [r.cpu_s / r.wall_s if r.wall_s else 0.0 for r in results],
    }
    return Run(
        level=level,
        records=tuple(records),
        start_ns=start,
        end_ns=end,
        warmup_requests=warmup,
        health=_health(results, th, nproc),
        meta=meta,
    )


async def run_load(
    client: ClientSettings,
    workload: WorkloadSpec,
    level: LoadLevel,
    *,
    requests: int,
    warmup: int = 200,
    duration_s: float | None = None,
    grace_s: float = 30.0,
    level_timeout_s: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    meta: Mapping[str, Any] | None = None,
    thresholds: HealthThresholds | None = None,
) -> Run:
    """Run ``warmup`` + ``requests`` requests of ``workload`` at ``level`` and return the
    measured ``Run`` (warm-up discarded). See the module docstring for the semantics of
    the duration bound, the level's time bound, cancellation and health."""
    if requests < 1:
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
    total = warmup + requests
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
        "health_thresholds": {
            "max_schedule_lag_p99_ms": th.max_schedule_lag_p99_ms,
            "max_loop_lag_p99_ms": th.max_loop_lag_p99_ms,
            "max_cpu_util": th.max_cpu_util,
        },
    }
    run_meta.update(dict(meta or {}))

    calibration: dict[str, Any] = {"fitted": False, "reason": "not needed"}
    lm = LengthModel()
    if workload.needs_calibration or workload.measures_overhead:
        if progress is not None:
            progress(Progress(0, 0, 0, 0.0, False, "calibrating", left_s()))
        probe = _calibrate if workload.needs_calibration else _measure_overhead
        try:
            lm, calibration = await asyncio.wait_for(probe(client, workload), left_s())
        except (asyncio.TimeoutError, TimeoutError):
            # Nothing was measured: the level ends here, as a level without requests.
            run_meta["calibration"] = {"fitted": False, "error": "cut by the level's time bound"}
            run_meta["level_timeout"] = {"phase": "calibrating", "bound_s": level_timeout_s}
            run_meta["processes"] = 0
            return _assemble(level, [], warmup, run_meta, th, 1)
    run_meta["calibration"] = calibration
    prompts = build_prompts(workload, total, lm)
    jobs = [
        _Job(i, request_body(client, p.text, p.osl), p.isl, p.osl, i < warmup)
        for i, p in enumerate(prompts)
    ]
    closed = level.mode == "concurrency"
    if not closed:
        for job, off in zip(jobs, arrival_offsets_ns(level, total), strict=True):
            job.offset_ns = off
    nproc = client.processes or auto_processes(level, workload.osl, client.resolved_transport)
    if closed:
        nproc = min(nproc, int(level.value))
    nproc = max(1, min(nproc, total))
    run_meta["processes"] = nproc
    concurrency = int(level.value) if closed else 0
    slots = split_concurrency(concurrency, nproc) if closed else [0] * nproc
    deal = split_round_robin(total, nproc)
    plans = [
        _Plan(
            worker=w,
            settings=client,
            jobs=[jobs[i] for i in deal[w]],
            closed=closed,
            slots=slots[w],
            max_connections=slots[w] if closed else None,
        )
        for w in range(nproc)
    ]
    measuring_since: list[float] = []

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
        if duration_s is not None and now - measuring_since[0] > duration_s:
            phase = "draining"
        progress(Progress(done, requests, failed, elapsed, False, phase, left_s()))

    limits = _Limits(*_duration_ns(duration_s, grace_s), level_end_ns)
    if nproc == 1:
        results = await _run_inprocess(plans[0], limits, report)
    else:
        results = await _run_processes(plans, limits, report)
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
) -> list[_WorkerResult] | _Interrupted:
    stop = asyncio.Event()
    counter = _Counter()
    t0 = perf_counter_ns() + 1_000_000
    bound = limits.bound()

    async def reporter() -> None:
        while True:
            await asyncio.sleep(_PROGRESS_S)
            report(counter.done, counter.failed, counter.warm_done)

    rep = asyncio.ensure_future(reporter())
    task = asyncio.ensure_future(_drive(plan, t0, bound, stop, counter))
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
        # Start all workers at once; sending a plan (all its request bodies) blocks until
        # the child has started and read it, so each is sent from its own thread.
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
            elif msg[0] == "result":
                results[msg[1].worker] = msg[1]
        if interrupted:
            for c in conns:
                with contextlib.suppress(Exception):
                    c.send(("stop",))
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError, LoadError):
                t_end = time.monotonic() + _RESULT_TIMEOUT_S
                while len(results) < n:
                    msg = await next_msg(max(t_end - time.monotonic(), 0.01))
                    if msg[0] == "result":
                        results[msg[1].worker] = msg[1]
            return _Interrupted(list(results.values()))
        # Exact now that the records are decoded (during the run, in-stream errors were
        # not yet known).
        recs = [r for res in results.values() for r in res.records]
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
    requests: int,
    warmup: int = 200,
    duration_s: float | None = None,
    grace_s: float = 30.0,
    level_timeout_s: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    meta: Mapping[str, Any] | None = None,
    thresholds: HealthThresholds | None = None,
) -> Run:
    """``run_load`` on its own event loop, for synchronous callers (fixtures, scripts).

    Ctrl-C and SIGTERM cancel the load cleanly (``LoadInterrupted`` with the partial run,
    its ``signal`` naming which); a second one interrupts at once. Called from a thread
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
            loop.call_soon_threadsafe(main.cancel)
            # A second signal gets the handlers of before: Ctrl-C is the usual
            # KeyboardInterrupt, SIGTERM the engines' teardown (engines/lifecycle.py).
            for sig, handler in old.items():
                signal.signal(sig, handler)

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
