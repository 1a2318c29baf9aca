"""The sim engine's scheduler on the wall clock (``EngineLoop``), and the trace of the
tokens it writes (``TraceWriter``).

``EngineLoop`` runs the ``Scheduler`` against the wall clock. Simulated time maps to wall
time from the server's start (``perf_counter_ns``): a step planned at simulated time ``s``
with duration ``d`` has its tokens written to the clients' sockets at wall time
``t0 + s + d``. The loop never sleeps a step's length; it sleeps until the step's end on
the clock, so latency a client sees is the model's, plus the server's own lateness.

Lateness is measured on every token write (write time - scheduled time), kept as a
histogram, max and last value in ``/metrics`` and logged as a warning when a step's
writes end more than ``lag_warn_s`` behind schedule. When the server is so far behind
(``resync_s``) that catching up would only burst old tokens, it moves its simulated clock
to now and counts a resync: the simulated engine gets slower, which the metrics show.

The loop never spins: a step that schedules nothing while requests wait
(``SchedulerStalled``, a broken invariant: such requests are refused when they arrive) is
logged as an error and the stuck request fails (an error event in its stream, or a 500)
instead of blocking the queue with empty 0-s steps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from time import perf_counter_ns
from typing import IO

from . import admin, replicafaults
from .cluster import Advance
from .latencies import RequestLatencies
from .lateness import LatenessStats
from .profiles import Profile
from .scheduler import SimRequest
from .stream import Stream

__all__ = ["EngineLoop", "TraceWriter"]

log = logging.getLogger("pytest_llmslo.sim")

_FINE_SLEEP_S = 1.2e-3


class TraceWriter:
    """JSON lines, one per token written to a client: ``{"rid", "i", "t_ns", "sched_ns"}``
    (``t_ns`` is ``perf_counter_ns()`` just before the write, ``sched_ns`` when the
    model said the token exists). Flushed after every step so readers see whole steps."""

    def __init__(self, path: str) -> None:
        self._f: IO[str] = open(path, "a", buffering=1 << 16, encoding="utf-8")

    def token(self, rid: str, index: int, t_ns: int, sched_ns: int) -> None:
        self._f.write(f'{{"rid":"{rid}","i":{index},"t_ns":{t_ns},"sched_ns":{sched_ns}}}\n')

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class EngineLoop:
    """The scheduler on the wall clock (see the module docstring)."""

    def __init__(
        self,
        profile: Profile,
        *,
        trace: TraceWriter | None = None,
        lag_warn_s: float = 0.02,
        resync_s: float = 1.0,
    ) -> None:
        self.profile = profile
        self.cluster = profile.cluster()
        self.trace = trace
        self.lag_warn_s = lag_warn_s
        self.resync_s = resync_s
        self.t0_ns = perf_counter_ns()
        self.sim_now = 0.0
        self.lateness = LatenessStats()
        self.streams: dict[SimRequest, Stream] = {}
        # The engine-side latencies of finished requests, on the simulated clock (vLLM's
        # histograms: queue time, TTFT, ITL, E2E).
        self.latency = RequestLatencies()
        self._wake = asyncio.Event()
        self._last_warn = 0.0
        self._late_since_warn = 0
        self._up_logged = 0  # replicas added while running whose coming up is logged

    def wall_sim(self) -> float:
        """Now, on the simulated clock."""
        return (perf_counter_ns() - self.t0_ns) / 1e9

    def wake(self) -> None:
        """Look at the cluster's next event again (capacity was added)."""
        self._wake.set()

    def submit(self, stream: Stream) -> None:
        req = stream.req
        # Arrivals between events join at the current simulated time (the cluster starts
        # an idle instance's step there).
        self.cluster.submit(req, max(self.sim_now, self.wall_sim()))
        self.streams[req] = stream
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        self.latency.forget(req)
        stream = self.streams.pop(req, None)
        self.cluster.abort(req)
        if stream is not None:
            stream.cancel()

    def _failed(self, req: SimRequest, why: str) -> None:
        """A request that can never be scheduled: fail it, so the loop moves on rather
        than spinning on empty steps with the whole queue blocked behind it."""
        log.error("sim engine invariant broken: %s; failing it", why)
        stream = self.streams.pop(req, None)
        if stream is not None:
            stream.fail(f"the sim engine cannot schedule this request: {why}")

    async def run(self) -> None:
        cluster = self.cluster
        while True:
            t = cluster.next_event_s()
            if t is None:
                self._wake.clear()
                await self._wake.wait()
                # Idle time passes on the simulated clock too.
                self.sim_now = max(self.sim_now, self.wall_sim())
                continue
            t = max(t, self.sim_now)
            target_ns = self.t0_ns + round(t * 1e9)
            self._wake.clear()
            await self._sleep_until(target_ns)
            result = cluster.advance(t)
            self.sim_now = t
            if len(cluster.replicas_up) > self._up_logged:
                self._up_logged = admin.log_replicas_up(self, self._up_logged)
            self._emit(result)
            behind = (perf_counter_ns() - target_ns) / 1e9
            self.lateness.behind = behind > self.lag_warn_s
            if behind > self.lag_warn_s:
                self._warn(behind)
            if behind > self.resync_s:
                self.sim_now = self.wall_sim()
                self.lateness.resyncs += 1
                log.warning(
                    "sim engine %.3f s behind its schedule: simulated clock moved to now", behind
                )

    async def _sleep_until(self, target_ns: int) -> None:
        """Sleep until ``target_ns`` on ``perf_counter_ns``, usually within 0.2 ms.

        asyncio's timers round up to whole milliseconds (epoll), so the loop sleeps to
        about a millisecond before the target and the rest in ``time.sleep``, which
        blocks the loop for under ~1.5 ms but costs no CPU (no spinning on a shared host).
        """
        delay = (target_ns - perf_counter_ns()) / 1e9
        if delay > _FINE_SLEEP_S:
            await asyncio.sleep(delay - _FINE_SLEEP_S)
        else:
            # Always yield, so arrivals are read even when the loop is behind.
            await asyncio.sleep(0)
        rest = (target_ns - perf_counter_ns()) / 1e9
        if 0 < rest <= 2 * _FINE_SLEEP_S:
            time.sleep(rest)

    def _emit(self, result: Advance) -> None:
        for req, why in result.failed:
            self._failed(req, why)
        for req, why in result.lost:
            replicafaults.lose(self, req, why, abrupt=False)
        trace = self.trace
        stats = self.lateness
        warn = self.lag_warn_s
        for e in result.emitted:
            stream = self.streams.get(e.req)
            if stream is None:
                continue
            # Taken just before the write: a reader on another core can see the bytes
            # before a timestamp taken after the write returns.
            t = perf_counter_ns()
            due = self.t0_ns + round(e.at_s * 1e9)
            ok = stream.emit(e.index, e.last)
            req = e.req
            self.latency.emitted(req, e.index, e.at_s, e.last, req.arrival_s, req.first_scheduled_s)
            stats.add((t - due) / 1e9, warn)
            if trace is not None and ok:
                trace.token(e.req.rid, e.index, t, due)
            if e.last:
                self.streams.pop(e.req, None)
            elif not ok:
                self.abort(e.req)
        if trace is not None and result.emitted:
            trace.flush()

    def _warn(self, behind: float) -> None:
        self._late_since_warn += 1
        now = time.monotonic()
        if now - self._last_warn >= 5.0:
            log.warning(
                "sim engine behind schedule: %.1f ms late at a step end (%d late steps since "
                "the last warning); the host CPU is too busy for honest timing",
                behind * 1e3,
                self._late_since_warn,
            )
            self._last_warn = now
            self._late_since_warn = 0
