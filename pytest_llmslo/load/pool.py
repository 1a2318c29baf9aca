"""The parent side: a level's workers run in this process (one worker) or as worker
processes (several), and their results come back.

Worker processes are plain subprocesses (``python -m pytest_llmslo.load.worker``) that
speak the worker protocol (``protocol.py``) over a socketpair. They start, build their
requests, report ready, and all begin at one absolute ``t0`` (``perf_counter_ns`` is
``CLOCK_MONOTONIC``, shared by every process on Linux, so their timestamps are
comparable). Their finished exchanges come back undecoded, in columnar batches, and are
decoded here into one ``RecordStore`` (in memory up to ``records_memory``, in files beyond
it): past the budget during the run (all at once with early stop, which needs the values),
the rest at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

from ..errors import LoadError
from ..records import RequestRecord
from ..recordstore import RecordStore
from .backlog import SLICE_NS, Backlog, pin_mmap_threshold
from .drive import Counter, Driver, WorkerResult
from .jobsource import JobSource
from .levelplan import Limits, WorkerPlan
from .protocol import (
    PROTOCOL_VERSION,
    Drain,
    Failure,
    Go,
    Hello,
    Message,
    Raw,
    Ready,
    Result,
    Stop,
    Tally,
    check_version,
)
from .transports import make_transport
from .wire import Link, WireError

__all__ = [
    "Gone",
    "Interrupted",
    "Pool",
    "Report",
    "Watch",
    "drive_pool",
    "run_inprocess",
    "run_processes",
]

PROGRESS_S = 0.25
_EARLY_STOP_EVERY_S = 0.5
_START_MARGIN_NS = 50_000_000  # t0 this far after every worker said ready
_READY_TIMEOUT_S = 300.0  # workers build their requests before saying ready
# After a stop (an interrupt), how long to wait for the workers' partial results: a worker
# cuts its streams and answers within a fraction of a second; one that does not answer in
# this time is not waited for (what it shipped before is kept: ``finish``).
_STOP_RESULTS_S = 5.0
_CLOSE_S = 5.0  # how long the worker processes get to exit, all together, then SIGKILL

#: Gets the counts so far: done, failed, warm-up done.
Report = Callable[[int, int, int], None]
#: Sees the records decoded so far; True when the level should drain now (early stop).
Watch = Callable[[Sequence[RequestRecord]], bool]


@dataclass(slots=True)
class Interrupted:
    """The run was interrupted; ``results`` are what the workers measured until then."""

    results: list[WorkerResult]


@dataclass(frozen=True, slots=True)
class Gone:
    """The parent's own note that a worker's connection ended before its result (or, for
    a remote worker, that it failed)."""

    kind = "lost"
    worker: int
    reason: str


async def run_inprocess(
    plan: WorkerPlan, limits: Limits, report: Report, watch: Watch | None
) -> list[WorkerResult] | Interrupted:
    """One worker, on this process's event loop."""
    stop = asyncio.Event()
    counter = Counter()
    source = JobSource(plan.jobs)
    source.prefill()
    transport = make_transport(plan.settings, plan.max_connections)
    store = RecordStore(plan.records_memory)  # before t0: it may move older stores to files
    t0 = perf_counter_ns() + 1_000_000
    bound = limits.bound()
    seen: list[RequestRecord] = []

    async def reporter() -> None:
        checked = 0
        last = time.monotonic()
        while True:
            await asyncio.sleep(PROGRESS_S)
            report(counter.done, counter.failed, counter.warm_done)
            now = time.monotonic()
            if watch is not None and len(seen) > checked and now - last >= _EARLY_STOP_EVERY_S:
                checked, last = len(seen), now
                if watch(seen):
                    bound.drain_now()

    rep = asyncio.ensure_future(reporter())
    on_record = seen.append if watch is not None else None
    driver = Driver(plan, source, transport, bound, stop, counter)
    task = asyncio.ensure_future(driver.run(t0, on_record, store=store))
    try:
        res = await asyncio.shield(task)
    except asyncio.CancelledError:
        stop.set()
        res = await task
        return Interrupted([res])
    finally:
        rep.cancel()
    n = len(res.records)
    report(n, n - _ok_count(res.records), counter.warm_done)
    return [res]


def _ok_count(records: Sequence[RequestRecord]) -> int:
    if isinstance(records, RecordStore):
        return int(records.ok().sum())
    return sum(r.ok for r in records)


def _spawn_worker() -> tuple[subprocess.Popen[bytes], Link]:
    """Start one worker as ``python -m pytest_llmslo.load.worker FD PPID`` on a socketpair.

    A plain subprocess rather than ``multiprocessing``: spawn would re-import the caller's
    ``__main__`` (breaking any script without a main guard) and fork is unsafe in a
    process that runs threads or an event loop. The worker dies with the thread that
    calls this (its parent-death signal, ``parentdeath.py``).
    """
    parent_sock, child_sock = socket.socketpair()
    fd = child_sock.fileno()
    env = dict(os.environ)
    # The child must import this very package, wherever it was imported from.
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_llmslo.load.worker", str(fd), str(os.getpid())],
            pass_fds=(fd,),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=False,
        )
    finally:
        child_sock.close()
    return proc, Link(parent_sock)


class Pool:
    """The worker processes of one level, their connections, and what came back."""

    def __init__(self, plans: list[WorkerPlan], report: Report, watch: Watch | None) -> None:
        self.plans = plans
        self.report = report
        self.watch = watch
        self.loop = asyncio.get_running_loop()
        self.inbox: asyncio.Queue[Message | Gone] = asyncio.Queue()
        self.conns: list[Link] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.results: dict[int, WorkerResult] = {}
        self.tallies = {p.worker: (0, 0, 0) for p in plans}
        self.stop_decode_s = 0.0  # decoded after a stop, while the workers cut
        # The workers' finished exchanges, decoded here: past the budget during the run
        # (or all of them at once with early stop, which needs the values), the rest at
        # the end. The budget is the parent's: the batches it holds are its memory.
        pin_mmap_threshold()
        limits = [p.records_memory for p in plans]
        self.store = RecordStore(None if None in limits else max(x or 0 for x in limits))
        self.backlog = Backlog(
            budget=max(p.defer_bytes for p in plans),
            store=self.store,
            answers=plans[0].jobs.workload.answer_book() if plans else None,
        )

    def _read(self, conn: Link, worker: int) -> None:
        """A worker's messages into the inbox, read by a thread of its own."""
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError, WireError) as exc:
                self.loop.call_soon_threadsafe(self.inbox.put_nowait, Gone(worker, repr(exc)))
                return
            self.loop.call_soon_threadsafe(self.inbox.put_nowait, msg)
            if msg.kind in ("result", "failure"):
                return

    def expected(self) -> int:
        """How many results are still to come, at most (remote workers may be lost)."""
        return len(self.plans)

    def go(self, t0_ns: int, limits: Limits) -> None:
        for c in self.conns:
            c.send(Go(t0_ns, limits))

    async def settle(self) -> None:
        """After the results (or the interrupt): nothing to do for local processes."""

    def send_all(self, msg: Message) -> None:
        for c in self.conns:
            with contextlib.suppress(Exception):
                c.send(msg)

    async def next_msg(self, timeout: float | None) -> Message:
        msg = await asyncio.wait_for(self.inbox.get(), timeout)
        if isinstance(msg, Failure):
            raise LoadError(f"a load worker process failed:\n{msg.error}")
        if isinstance(msg, Gone):
            code = self.procs[msg.worker].poll() if msg.worker < len(self.procs) else None
            raise LoadError(
                f"load worker {msg.worker} exited before sending its results "
                f"(exit status {code}, {msg.reason})"
            )
        return msg

    def handle(self, msg: Message) -> None:
        if isinstance(msg, Raw):
            self.backlog.add_batch(msg.batch, msg.worker)
        elif isinstance(msg, Result):
            self.results[msg.result.worker] = msg.result

    async def start(self) -> None:
        """Start every worker at once; each builds its requests before it says ready.

        The processes are started from this thread, the one that runs the level (it
        outlives them): a worker's parent-death signal follows the thread that started it,
        and an executor's thread may end first. Their plans go out in parallel."""
        try:
            for _ in self.plans:
                proc, conn = _spawn_worker()
                self.procs.append(proc)
                self.conns.append(conn)
        except OSError as exc:
            raise LoadError(f"cannot start a load worker process: {exc!r}") from None
        sent = await asyncio.gather(
            *(
                self.loop.run_in_executor(None, conn.send, Hello(PROTOCOL_VERSION, plan))
                for plan, conn in zip(self.plans, self.conns, strict=True)
            ),
            return_exceptions=True,
        )
        errors = [x for x in sent if isinstance(x, BaseException)]
        if errors:
            raise LoadError(f"cannot start a load worker process: {errors[0]!r}")
        for plan, conn in zip(self.plans, self.conns, strict=True):
            threading.Thread(target=self._read, args=(conn, plan.worker), daemon=True).start()
        ready = 0
        while ready < len(self.plans):
            msg = await self.next_msg(_READY_TIMEOUT_S)
            if isinstance(msg, Ready):
                check_version(msg.version, ours_side="parent", their_side="worker")
                ready += 1

    async def decoder(self) -> None:
        """Decode past the budget; ask the early-stop callback twice a second."""
        drained, checked, last_check = False, 0, time.monotonic()
        while True:
            if self.backlog.over_budget:
                self.backlog.decode_slice()
                await asyncio.sleep(0)
                continue
            now = time.monotonic()
            ready_to_check = now - last_check >= _EARLY_STOP_EVERY_S
            watch, decoded = self.watch, self.store
            if watch is not None and not drained and ready_to_check and len(decoded) > checked:
                checked, last_check = len(decoded), now
                if watch(decoded):
                    drained = True
                    self.send_all(Drain())
            await asyncio.sleep(0.01)

    async def collect(self) -> bool:
        """Take the workers' messages until every result came; False when interrupted
        (then ask the workers to stop, and wait a while for their partial results)."""
        last = 0.0
        while len(self.results) < self.expected():
            try:
                msg = await self.next_msg(None)
            except asyncio.CancelledError:
                break
            if isinstance(msg, Tally):
                self.tallies[msg.worker] = (msg.done, msg.failed, msg.warm_done)
                now = time.monotonic()
                if now - last >= PROGRESS_S:
                    last = now
                    self.report(*(sum(s[i] for s in self.tallies.values()) for i in range(3)))
            else:
                self.handle(msg)
        else:
            return True
        self.send_all(Stop())
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await self._partial_results(time.monotonic() + _STOP_RESULTS_S)
        return False

    async def _partial_results(self, t_end: float) -> None:
        """The workers' messages after a ``Stop``, until every result came or ``t_end``;
        while they cut their streams, what came before is decoded here, a slice at a
        time (the decoding is most of what an interrupted level has left to do)."""
        backlog, inbox = self.backlog, self.inbox
        ended = 0  # workers that failed or went away instead: not waited for
        while len(self.results) + ended < self.expected():
            if len(backlog) and inbox.empty():
                c0 = time.thread_time()
                backlog.decode_for(SLICE_NS)
                self.stop_decode_s += time.thread_time() - c0
                await asyncio.sleep(0)
                if time.monotonic() >= t_end:
                    return
                continue
            try:
                self.handle(await self.next_msg(max(t_end - time.monotonic(), 0.01)))
            except LoadError:
                ended += 1

    def finish(self) -> list[WorkerResult]:
        """Decode what is left and hand each worker its records and its share of the
        decoding."""
        backlog, results = self.backlog, self.results
        d0 = time.process_time()
        store = backlog.drain()
        after_s = time.process_time() - d0 + self.stop_decode_s
        for plan in self.plans:
            if plan.worker not in results and len(store.where(plan.worker)):
                # Stopped before its result came (it failed, or did not answer in time):
                # what it shipped before is kept, under a result of its own.
                results[plan.worker] = WorkerResult(
                    plan.worker,
                    closed=plan.closed,
                    slots=plan.slots,
                    multi_turn=plan.jobs.workload.multi_turn,
                )
        for w, res in results.items():
            res.records = store.where(w)
            # What the parent decoded is each worker's share of the decoding.
            res.decode_s = after_s / max(len(results), 1)
            res.decode_run_s = backlog.decode_cpu_ns / 1e9 / max(len(results), 1)
            res.longest_slice_ms = backlog.longest_slice_ns / 1e6
        if results:
            # One book scored every worker's answers: it goes with the first result.
            results[min(results)].answers = backlog.answers
        return [results[w] for w in sorted(results)]

    def close(self) -> None:
        """Stop the workers; those not gone within ``_CLOSE_S`` (all together) are killed."""
        self.send_all(Stop())
        t_end = time.monotonic() + _CLOSE_S
        for p in self.procs:
            try:
                p.wait(timeout=max(t_end - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        for c in self.conns:
            with contextlib.suppress(Exception):
                c.close()


async def run_processes(
    plans: list[WorkerPlan], limits: Limits, report: Report, watch: Watch | None
) -> list[WorkerResult] | Interrupted:
    """One worker process a plan, all started at one ``t0``."""
    return await drive_pool(Pool(plans, report, watch), limits, report, _START_MARGIN_NS)


async def drive_pool(
    pool: Pool, limits: Limits, report: Report, margin_ns: int
) -> list[WorkerResult] | Interrupted:
    """Start ``pool``'s workers, let them go at one ``t0`` (``margin_ns`` from when all
    were ready) and take what they measured."""
    try:
        await pool.start()
        pool.go(perf_counter_ns() + margin_ns, limits)
        decoding = pool.loop.create_task(pool.decoder())
        try:
            complete = await pool.collect()
        finally:
            decoding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await decoding
        await pool.settle()
        results = pool.finish()
        if not complete:
            return Interrupted(results)
        # Exact now that the records are decoded (during the run, in-stream errors were
        # not yet known).
        n, ok = len(pool.store), int(pool.store.ok().sum())
        report(n, n - ok, sum(r.warmup_done for r in results))
        return results
    finally:
        pool.close()
