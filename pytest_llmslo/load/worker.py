"""The worker side: ``python -m pytest_llmslo.load.worker FD PPID``, one load-generator
process.

Started by ``pool.py`` with one end of a socketpair as FD and its parent's pid as PPID
(or, for a remote worker, on a TCP connection, level after level: ``remote_worker.py``),
it speaks the worker protocol
(``protocol.py``): it receives ``Hello`` with its plan, builds its requests and its
transport, says ``Ready``, waits for ``Go`` and the common start time, runs
(``drive.Driver``), ships its finished exchanges undecoded as ``Raw`` messages, each a
columnar batch (``backlog.RawBatch``), and its counts as ``Tally``, and ends with its
``Result`` (or a ``Failure``). The streams of its eval requests are among those exchanges:
the parent scores them, the worker scores nothing (its ``Ready`` names the eval rows it
built its requests from by their fingerprint). It dies with its parent
(``parentdeath.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import socket
import sys
import threading
from dataclasses import dataclass, fields, replace
from time import perf_counter_ns

from ..evals import AnswerBook, EvalSource
from ..evals.tasks import USER_TASKS
from .backlog import BatchBuilder
from .client import RawExchange, Transport, new_event_loop
from .drive import Counter, Driver, WorkerResult
from .jobsource import Job, JobSource
from .levelplan import WorkerPlan
from .parentdeath import die_with_parent
from .protocol import (
    PROTOCOL_VERSION,
    Failure,
    Go,
    Hello,
    Message,
    Ping,
    Pong,
    ProtocolError,
    Raw,
    Ready,
    Result,
    Stop,
    Tally,
    check_version,
)
from .transports import make_transport
from .wire import Link, WireError
from .workload import WorkloadSpec

__all__ = ["pong", "serve_level", "worker_main"]

SHIP_S = 0.05  # how often a worker hands its finished exchanges to the parent
PROGRESS_S = 0.25  # how often it reports its counts


class _Outbox:
    """A worker's messages to the parent, written by a thread of their own: a full socket
    (the parent busy) blocks that thread, never the event loop that takes timestamps."""

    def __init__(self, conn: Link) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="llmslo-outbox", daemon=True)
        self._thread.start()

    def put(self, msg: Message) -> None:
        self._queue.put(msg)

    def _run(self) -> None:
        while (msg := self._queue.get()) is not None:
            try:
                self._conn.send(msg)
            except (OSError, ValueError, WireError):
                return  # the parent went away

    def close(self, timeout: float = 60.0) -> None:
        """Send what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout)


@dataclass(frozen=True, slots=True)
class _Shipped(WorkloadSpec):
    """A worker's workload: its eval answers are not scored here but by the parent, from
    the streams the worker ships (``Raw``), so the worker makes no answer book: it neither
    imports the ``--slo-eval-scorer`` function nor reads the eval rows a second time."""

    def answer_book(self) -> AnswerBook | None:
        return None


def _eval_digest(spec: WorkloadSpec) -> str:
    """The fingerprint of the user's eval rows this worker builds its requests from."""
    if spec.eval_task is None or spec.eval_task not in USER_TASKS:
        return ""
    asked = (spec.eval_task, spec.seed, spec.isl, spec.eval_path, spec.eval_share)
    return EvalSource(*asked, spec.eval_scorer, spec.eval_hf).fingerprint


def _handshake(conn: Link, hello: object) -> tuple[WorkerPlan, JobSource, Transport]:
    """Take the plan, build the requests and the transport, say ready."""
    check_version(getattr(hello, "version", None), ours_side="worker", their_side="parent")
    if not isinstance(hello, Hello):
        raise ProtocolError(f"a load worker expected Hello first, got {hello!r:.80}")
    plan = hello.plan
    workload = _Shipped(
        **{f.name: getattr(plan.jobs.workload, f.name) for f in fields(WorkloadSpec)}
    )
    plan = replace(plan, jobs=replace(plan.jobs, workload=workload))
    source = JobSource(plan.jobs)
    source.prefill()
    transport = make_transport(plan.settings, plan.max_connections)
    conn.send(Ready(PROTOCOL_VERSION, plan.worker, _eval_digest(workload)))
    return plan, source, transport


def pong(conn: Link, ping: Ping, received_ns: int) -> None:
    """Answer a clock probe: when it came and when the answer leaves (``clock.py``)."""
    conn.send(Pong(ping.seq, received_ns, perf_counter_ns()))


def _wait_go(conn: Link) -> Go | None:
    """Answer clock probes until ``Go``; None when the parent sent anything else."""
    while True:
        msg = conn.recv()
        received = perf_counter_ns()
        if isinstance(msg, Ping):
            pong(conn, msg, received)
            continue
        return msg if isinstance(msg, Go) else None


def serve_level(conn: Link, hello: object) -> None:
    """One level on ``conn``, from its ``Hello`` to its ``Result`` (or ``Failure``); the
    control thread that reads ``Drain``/``Stop`` during the run is gone when it returns."""
    outbox: _Outbox | None = None
    control: threading.Thread | None = None
    try:
        plan, source, transport = _handshake(conn, hello)
        go = _wait_go(conn)
        if go is None:
            return
        outbox = _Outbox(conn)
        loop = new_event_loop(plan.settings.event_loop)
        try:
            bound = go.limits.bound()
            driver = Driver(plan, source, transport, bound, asyncio.Event(), Counter())
            control = threading.Thread(
                target=_listen, args=(conn, driver, loop), name="llmslo-control", daemon=True
            )
            res = loop.run_until_complete(_worker_async(control, outbox, driver, go.t0_ns))
        finally:
            loop.close()
        outbox.put(Result(res))
        outbox.close()
    except Exception:
        import traceback

        if outbox is not None:
            outbox.put(Failure(traceback.format_exc()))
            outbox.close()
        else:
            with contextlib.suppress(Exception):
                conn.send(Failure(traceback.format_exc()))
    if control is not None and control.ident is not None:
        # The parent ends every level with ``Stop``: the control thread reads it and ends,
        # and the connection is the next level's.
        control.join()


def worker_main(fd: int, parent_pid: int | None = None) -> None:
    """Entry point of one worker process (``python -m pytest_llmslo.load.worker FD PPID``):
    it dies with ``parent_pid``, where the platform allows (``parentdeath.py``)."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
    # The parent turns Ctrl-C and SIGTERM into a ``Stop`` message; a handler here would cut
    # requests before the parent could collect them (a CI runner signals the whole group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Link(socket.socket(fileno=fd))
    try:
        try:
            hello = conn.recv()
        except (EOFError, OSError, WireError):
            return
        serve_level(conn, hello)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _listen(conn: Link, driver: Driver, loop: asyncio.AbstractEventLoop) -> None:
    """The parent's ``Drain`` and ``Stop``, read by a blocking thread rather than
    ``loop.add_reader``: uvloop makes a watched fd non-blocking, and a large blocking
    ``send()`` on it (the results) would then break."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, WireError):
            msg = Stop()  # the parent went away, or sent what is not a message
        with contextlib.suppress(RuntimeError):
            if msg.kind == "drain":
                loop.call_soon_threadsafe(driver.bound.drain_now)
                continue
            if msg.kind == "stop":
                loop.call_soon_threadsafe(driver.stop.set)
        if msg.kind == "stop":
            return


async def _worker_async(
    control: threading.Thread, outbox: _Outbox, driver: Driver, t0_ns: int
) -> WorkerResult:
    worker, counter = driver.plan.worker, driver.counter
    finished = BatchBuilder()
    loop = asyncio.get_running_loop()
    control.start()

    def ship(job: Job, scheduled: int, raw: RawExchange) -> None:
        finished.add(job.index, job.isl, job.osl, scheduled, raw, job.session, job.turn)

    def flush() -> None:
        if len(finished):
            outbox.put(Raw(worker, finished.take()))

    async def report() -> None:
        ticks = 0
        while True:
            await asyncio.sleep(SHIP_S)
            flush()
            ticks += 1
            if ticks % round(PROGRESS_S / SHIP_S) == 0:
                outbox.put(Tally(worker, counter.done, counter.failed, counter.warm_done))

    reporter = loop.create_task(report())
    try:
        return await driver.run(t0_ns, ship=ship)
    finally:
        reporter.cancel()
        flush()


if __name__ == "__main__":
    worker_main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
