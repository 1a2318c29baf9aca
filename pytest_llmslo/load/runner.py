"""Stage 3 of a level (records): ``run_load(job)`` measures the ``LoadJob`` into a ``Run``.

Running a load: closed or open loop, in one or several processes, measured.

``run_load(job)`` drives a ``LoadJob``'s workload at its level:

- closed loop (``LoadLevel.concurrency(n)``): n slots, each sends its next request as soon
  as its previous one ended; that moment is the request's scheduled time;
- open loop (``LoadLevel.rate(r, "constant"|"poisson", seed)``): request i is sent at the
  absolute time ``t0 + offsets[i]`` (``schedule.py``), whatever happened before it.

Requests are built by each worker from the workload's seed, index by index
(``jobsource.JobSource``): all of them before the run when they fit a memory budget, else ahead
of need during it, in slices. A level bounded by ``duration_s`` alone (``requests=None``)
has no request count at all. Responses are decoded into records after the run, or, past a
byte budget, during it (``backlog.Backlog``): with several processes the workers ship the
raw bytes to the parent, which decodes them, so a worker's event loop never decodes at
all; a lone in-process worker decodes in slices of about a millisecond. No bulk work ever
holds the loop that takes timestamps, which is what keeps long runs as true as short ones.

Remote workers (``LoadJob.workers``, ``remote.py``): the level runs on workers that joined
the session over TCP, one plan each, their clocks measured and their records put on this
process's clock (``remote_pool.py``, ``clock.py``); ``run.meta["remote"]`` holds each
worker's clock and health (``fleet.py``).

Several processes: above a modest load one Python event loop cannot read hundreds of
streams without its own lag showing up as latency, so the load is split over worker
processes (``python -m pytest_llmslo.load.worker``), each with its own event loop and
connection pool. They start, report ready, and all begin at one absolute ``t0``
(``perf_counter_ns`` is ``CLOCK_MONOTONIC``, shared by every process on Linux, so their
timestamps are comparable); their records are merged. ``ClientSettings.processes``
overrides the automatic choice (``levelplan.auto_processes``).

Where each part lives: ``job.py`` (what a load is asked: ``LoadJob``), ``levelplan.py`` (a level
dealt to its workers), ``drive.py`` (one worker's sends: closed loop, open loop,
conversations), ``pool.py`` (the parent side: in-process or worker processes),
``worker.py`` (the worker side) and ``protocol.py`` (the messages between them); this
module runs a ``LoadJob`` through them and assembles the ``Run``.

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
the level in progress is cut and kept, also when a second signal follows while it is cut.
In a session the session's handler (``interrupts.py``) records the signals and the load
checks them every ``interrupts.POLL_S``; outside one (a script) the load puts handlers of
its own in place for its duration, and there a third signal interrupts at once.

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
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from typing import Any

from .. import interrupts
from .._version import __version__
from ..errors import LoadError, LoadInterrupted
from ..records import LoadLevel, RequestRecord, Run
from ..recordstore import RecordStore, RecordView
from ..runmeta import RunMeta
from .calibrate import calibrate, measure_overhead
from .client import new_event_loop
from .drive import WorkerResult
from .fleet import with_workers
from .health import HealthThresholds, assess
from .job import EarlyStop, LoadJob, Phase, Progress
from .levelplan import Limits, auto_processes, plan_level
from .pool import Interrupted, run_inprocess, run_processes
from .promptlengths import LengthModel
from .remote_pool import RemoteLevel, run_remote

__all__ = [
    "EarlyStop",
    "HealthThresholds",
    "LoadJob",
    "Phase",
    "Progress",
    "auto_processes",
    "run_load",
    "run_load_sync",
]


def _assemble(
    level: LoadLevel,
    results: list[WorkerResult],
    warmup: int,
    meta: dict[str, Any],
    th: HealthThresholds,
    nproc: int,
) -> Run:
    records = merged_records(results)
    if isinstance(records, RecordStore):
        sent, ends = records.column("sent_ns"), records.column("end_ns")
        start = int(sent.min()) if sent.size else 0
        end = int(ends.max()) if ends.size else start
    else:
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
    books = [r.answers for r in results if r.answers is not None]
    if books:
        for book in books[1:]:
            books[0].merge(book)
        meta["quality"] = books[0].to_dict()
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
        records=records,
        start_ns=start,
        end_ns=end,
        warmup_requests=warmup,
        health=assess(results, th, nproc),
        meta=RunMeta.from_dict(meta),
    )


def merged_records(results: list[WorkerResult]) -> Sequence[RequestRecord]:
    """The records of every worker, sorted by index: the store they share (the worker
    processes'), a lone worker's own, or, for records given as lists, a sorted tuple."""
    stores = {id(s): s for s in (_store_of(res.records) for res in results) if s is not None}
    if len(stores) == 1 and all(_store_of(res.records) is not None for res in results):
        return next(iter(stores.values())).finish()
    return tuple(sorted((r for res in results for r in res.records), key=lambda r: r.index))


def _store_of(records: Sequence[RequestRecord]) -> RecordStore | None:
    if isinstance(records, RecordStore):
        return records
    return records.store if isinstance(records, RecordView) else None


def _run_meta(job: LoadJob) -> dict[str, Any]:
    run_meta: dict[str, Any] = {
        "harness": "pytest-llmslo",
        "harness_version": __version__,
        "workload": job.workload.to_dict(),
        "client": job.client.to_dict(),
        "level": job.level.to_dict(),
        "requests": job.requests,
        "warmup": job.warmup,
        "duration_s": job.duration_s,
        "grace_s": job.grace_s,
        "level_timeout_s": job.level_timeout_s,
        "early_stop": None,
        "health_thresholds": job.health.to_dict(),
    }
    run_meta.update(dict(job.meta or {}))
    return run_meta


class _Watch:
    """The level's progress reports and its early-stop callback, as the workers' side
    calls them: ``report(done, failed, warm_done)`` and ``watch(records)``."""

    def __init__(self, job: LoadJob, started: float, level_end_ns: int | None) -> None:
        self.job = job
        self.started = started
        self.level_end_ns = level_end_ns
        self.measuring_since: float | None = None
        self.stopped: str | None = None

    def left_s(self) -> float | None:
        end = self.level_end_ns
        return None if end is None else max(end - perf_counter_ns(), 0) / 1e9

    def report(self, done: int, failed: int, warm_done: int) -> None:
        progress, job = self.job.progress, self.job
        if progress is None:
            return
        now = time.monotonic()
        elapsed = now - self.started
        if warm_done < job.warmup and done == 0:
            progress(Progress(warm_done, job.warmup, 0, elapsed, True, "warm-up", self.left_s()))
            return
        if self.measuring_since is None:
            self.measuring_since = now
        phase: Phase = "measuring"
        over = job.duration_s is not None and now - self.measuring_since > job.duration_s
        if self.stopped is not None or over:
            phase = "draining"
        progress(Progress(done, job.requests or 0, failed, elapsed, False, phase, self.left_s()))

    def watch(self, records: Sequence[RequestRecord]) -> bool:
        """Ask the early-stop callback; True when the level should drain now."""
        if self.job.early_stop is None or self.stopped is not None:
            return False
        reason = self.job.early_stop(records)
        if reason:
            self.stopped = reason
            return True
        return False


async def _calibrate(job: LoadJob, watch: _Watch, run_meta: dict[str, Any]) -> LengthModel | None:
    """Fit prompt lengths to the server (or measure its overhead) when the workload asks;
    None when the level's time bound passed first (``run_meta`` says so)."""
    calibration: dict[str, Any] = {"fitted": False, "reason": "not needed"}
    lm = LengthModel()
    workload = job.workload
    if workload.needs_calibration or workload.measures_overhead:
        if job.progress is not None:
            job.progress(Progress(0, 0, 0, 0.0, False, "calibrating", watch.left_s()))
        probe = calibrate if workload.needs_calibration else measure_overhead
        try:
            lm, calibration = await asyncio.wait_for(probe(job.client, workload), watch.left_s())
        except (asyncio.TimeoutError, TimeoutError):
            # Nothing was measured: the level ends here, as a level without requests.
            run_meta["calibration"] = {"fitted": False, "error": "cut by the level's time bound"}
            run_meta["level_timeout"] = {"phase": "calibrating", "bound_s": job.level_timeout_s}
            run_meta["processes"] = 0
            return None
    run_meta["calibration"] = calibration
    return lm


async def run_load(job: LoadJob) -> Run:
    """Run ``job.warmup`` + ``job.requests`` requests of its workload at its level and
    return the measured ``Run`` (warm-up discarded); ``requests=None`` runs until
    ``duration_s``. See the module docstring for the duration bound, the level's time
    bound, early stop, cancellation and health."""
    th = job.health
    started = time.monotonic()
    level_end_ns = (
        None if job.level_timeout_s is None else perf_counter_ns() + int(job.level_timeout_s * 1e9)
    )
    watch = _Watch(job, started, level_end_ns)
    run_meta = _run_meta(job)
    lm = await _calibrate(job, watch, run_meta)
    if lm is None:
        return _assemble(job.level, [], job.warmup, run_meta, th, 1)
    links = None
    if job.workers is not None:
        links = await asyncio.get_running_loop().run_in_executor(None, job.workers.ensure, job.say)
    planned = plan_level(job, lm, None if links is None else len(links))
    nproc = planned.processes
    run_meta["processes"] = nproc
    run_meta["traffic"] = planned.traffic
    limits = Limits.of(job, level_end_ns)
    watching = watch.watch if job.early_stop else None
    remote: RemoteLevel | None = None
    if links is not None:
        results, remote = await run_remote(
            links[:nproc], planned.plans, limits, watch.report, watching
        )
    elif nproc == 1:
        results = await run_inprocess(planned.plans[0], limits, watch.report, watching)
    else:
        results = await run_processes(planned.plans, limits, watch.report, watching)
    if watch.stopped is not None:
        run_meta["early_stop"] = {"reason": watch.stopped}
    if isinstance(results, Interrupted):
        meta = {**run_meta, "interrupted": True}
        run = _assemble(job.level, results.results, job.warmup, meta, th, nproc)
        if remote is not None:
            run = with_workers(run, results.results, remote, th)
        raise LoadInterrupted(
            f"load interrupted after {len(run.records)} measured requests", run=run
        )
    if any(r.hit_level_bound for r in results):
        measured = sum(len(r.records) for r in results)
        run_meta["level_timeout"] = {
            "phase": "measuring" if measured else "warm-up",
            "bound_s": job.level_timeout_s,
            "warmup_done": sum(r.warmup_done for r in results),
        }
    run = _assemble(job.level, results, job.warmup, run_meta, th, nproc)
    return run if remote is None else with_workers(run, results, remote, th)


def run_load_sync(job: LoadJob) -> Run:
    """``run_load`` on its own event loop, for synchronous callers (fixtures, scripts).

    Ctrl-C and SIGTERM cancel the load cleanly (``LoadInterrupted`` with the partial run,
    its ``signal`` naming which); a second one while the load is being cut is noted (the
    partial run is still kept). In a session a signal recorded before the load began
    cancels it at once. Called from a thread
    that already runs a loop, the load runs on a helper thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_new_loop(job)
    out: queue.Queue[tuple[str, Any]] = queue.Queue()

    def target() -> None:
        try:
            out.put(("ok", _run_on_new_loop(job)))
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


def _run_on_new_loop(job: LoadJob) -> Run:
    loop = new_event_loop(job.client.event_loop)
    guard = interrupts.active()
    if guard is not None:
        # In a session its handler records the signals; the load checks them.
        main = loop.create_task(_cut_on_stop(job, guard))
        try:
            with guard.owned():
                return _complete(loop, main, lambda: guard.received[0] if guard.received else None)
        finally:
            _close_loop(loop)
    main = loop.create_task(run_load(job))
    received: list[str] = []
    old = _own_handlers(loop, main, received)
    try:
        return _complete(loop, main, lambda: received[0] if received else None)
    finally:
        for number, handler in old.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(number, handler)
        _close_loop(loop)


async def _cut_on_stop(job: LoadJob, guard: interrupts.Interrupts) -> Run:
    """``run_load(job)``, cancelled (the requests in flight cut and kept) within
    ``interrupts.POLL_S`` of a stop signal recorded by the session's handler; at once when
    one arrived before the load began."""
    load = asyncio.ensure_future(run_load(job))
    while not load.done():
        if guard.stop_requested:
            load.cancel()
            break
        await asyncio.wait({load}, timeout=interrupts.POLL_S)
    return await load


def _complete(
    loop: asyncio.AbstractEventLoop, main: asyncio.Task[Run], signame: Callable[[], str | None]
) -> Run:
    try:
        return loop.run_until_complete(main)
    except LoadInterrupted as exc:
        exc.signal = signame()
        raise
    except asyncio.CancelledError as exc:
        err = LoadInterrupted("load cancelled")
        err.signal = signame()
        raise err from exc


def _own_handlers(
    loop: asyncio.AbstractEventLoop, main: asyncio.Task[Run], received: list[str]
) -> dict[int, Any]:
    """Outside a session (a script's ``run_load_sync``): handlers that cancel the load on
    the first signal, note a second one (raised in the middle of the cut it would lose the
    partial run) and give a third to the handlers of before. The main thread only."""
    old: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return old

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        if len(received) == 1:
            loop.call_soon_threadsafe(main.cancel)
            return
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
    return old


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
