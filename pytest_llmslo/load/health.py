"""The load generator checks itself: was the client, not the engine, the bottleneck?

Each worker measures, during the run:

- schedule lag: sent − scheduled of every request. An open loop's schedule is its arrival
  times; a closed loop's slot is due to send again when the previous response's last byte
  arrived, so there the lag is the client's *turnaround*, the time a slot held no
  request because the client had not got round to sending the next one;
- event-loop lag: a ticker every 10 ms notes how late it wakes; a wake later than
  ``max_loop_lag_p99_ms`` is a *stall* window (from when it should have woken to when the
  reads it held up were taken);
- CPU: process time over wall time.

``assess`` turns them into a ``ClientHealth``. A run is invalid when

- an open loop's schedule lag P99 is above ``max_schedule_lag_p99_ms`` (the rate asked
  was not sent), or a closed loop's slots stood idle more than ``max_idle_share`` (1 %) of
  the time with a turnaround P99 above the same lag threshold (fewer requests in flight
  than asked; a turnaround of a fraction of a millisecond is what any client costs, even
  when it is a large share of requests that fail at once);
- stalls touched more than ``max_stalled_tokens`` (0.1 %) of the streamed tokens: what a
  P99 misses, one stall of two seconds in a forty-second run leaves the loop-lag P99
  untouched while it turns a few hundred first tokens into a TTFT P99 of seconds. The
  reason says when the longest stall was, for how long, and how many tokens it touched;
- a process's CPU is above ``max_cpu_util`` (no slack left);
- with read stamps only: the loop lag P99 is above its threshold (every read was dated
  that late);
- the load applied fell short of the load asked (``applied_load``), whatever the cause: a
  closed loop's time-averaged requests in flight over its measured window, or an open
  loop's achieved arrival rate, below ``min_load_share`` (90 %) of what the level asked.
  The lag rules above see a client that was late by more than a threshold; this one sees
  the sum of many small delays (a client descheduled a few milliseconds at every turn, by
  other work on the machine), which leaves every lag under its threshold while the engine
  gets a lighter load than asked, and a level that fails at the asked load can pass.

Which stamps a stall can move depends on where they come from (``stamped.py``). A chunk
stamped when the process *read* it is late by the whole stall, so every chunk read in a
stall window counts. A chunk stamped by the kernel on *arrival* is right however late it
was read, unless it shared its read with later chunks (the read carries the last one's
stamp): only those count, the chunks that share their stamp with the next chunk of the
same request inside a stall window. That is also why the loop-lag P99 rule applies to read
stamps alone: with kernel stamps a late loop delays sends, which the two lag rules above
measure, and not the times of what it receives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..records import ClientHealth, RequestRecord
from ..recordstore import RecordStore, RecordView

__all__ = [
    "AppliedLoad",
    "HealthThresholds",
    "WorkerMeasures",
    "applied_load",
    "assess",
    "stalled_tokens",
]


@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """When a run is invalid because the client was the bottleneck.

    - an open loop's schedule lag P99 above ``max_schedule_lag_p99_ms``: requests left
      later than planned, so the rate was not what was asked;
    - a closed loop's slots idle, waiting for the client to send, more than
      ``max_idle_share`` of the time, with a turnaround P99 above
      ``max_schedule_lag_p99_ms``: fewer requests were in flight than asked;
    - event-loop lag P99 above ``max_loop_lag_p99_ms`` (read stamps only): callbacks, and
      so chunk timestamps, ran that late; a single wake later than it is a stall window;
    - tokens a stall may have moved (``stalled_tokens``) above ``max_stalled_tokens`` of
      all tokens;
    - CPU above ``max_cpu_util`` of a core in any client process: the loop had no slack;
    - the load applied below ``min_load_share`` of the load asked (``applied_load``): the
      engine saw a lighter load than the level names (0 turns the check off);
    - remote workers only: a worker's clock offset known less precisely than
      ``max_clock_uncertainty_ms`` (``clock.py``): its requests cannot be placed against
      the others' that precisely (the merged arrivals, the span, the time series).
    """

    max_schedule_lag_p99_ms: float = 10.0
    max_loop_lag_p99_ms: float = 10.0
    max_cpu_util: float = 0.9
    max_stalled_tokens: float = 0.001
    max_idle_share: float = 0.01
    min_load_share: float = 0.9
    max_clock_uncertainty_ms: float = 1.0

    def to_dict(self) -> dict[str, float]:
        return {
            "max_schedule_lag_p99_ms": self.max_schedule_lag_p99_ms,
            "max_loop_lag_p99_ms": self.max_loop_lag_p99_ms,
            "max_cpu_util": self.max_cpu_util,
            "max_stalled_tokens": self.max_stalled_tokens,
            "max_idle_share": self.max_idle_share,
            "min_load_share": self.min_load_share,
            "max_clock_uncertainty_ms": self.max_clock_uncertainty_ms,
        }


class WorkerMeasures(Protocol):
    """What each worker hands over (``drive.WorkerResult`` has these)."""

    records: Sequence[RequestRecord]
    schedule_lag_ns: list[int]
    loop_lag_ns: list[int]
    stalls: list[tuple[int, int]]
    cpu_s: float
    wall_s: float
    t0_ns: int
    kernel_stamps: bool
    closed: bool
    slots: int
    multi_turn: bool
    side_flight: list[tuple[int, int]]


def stalled_tokens(
    records: Sequence[RequestRecord],
    stalls: Sequence[tuple[int, int]],
    kernel_stamps: bool = False,
) -> int:
    """How many chunk timestamps of ``records`` a stall may have moved: those inside one of
    the ``stalls`` windows ``(start_ns, end_ns]`` (the windows of one worker, which took
    those timestamps). With ``kernel_stamps`` only those that share their stamp with the
    next chunk of the same request count (see the module docstring)."""
    if not stalls or not records:
        return 0
    if isinstance(records, RecordStore | RecordView):
        flat = records.chunk_ns()
        if kernel_stamps and flat.size:
            # A chunk that shares its stamp with the next chunk of the same request.
            same = flat[:-1] == flat[1:]
            last = np.cumsum(records.column("n_chunks").astype(np.int64)) - 1
            same[last[(last >= 0) & (last < same.size)]] = False
            flat = flat[:-1][same]
    else:
        arrays = [np.frombuffer(r.chunk_ns, dtype=np.int64) for r in records]
        if kernel_stamps:
            arrays = [a[:-1][a[:-1] == a[1:]] for a in arrays if a.size > 1]
        if not arrays:
            return 0
        flat = np.concatenate(arrays)
    if flat.size == 0:
        return 0
    flat.sort()
    total = 0
    for start, end in stalls:
        total += int(np.searchsorted(flat, end, "right") - np.searchsorted(flat, start, "right"))
    return total


@dataclass(frozen=True, slots=True)
class AppliedLoad:
    """The load the client applied against the load asked. ``kind`` is ``in_flight`` (a
    closed loop: time-averaged requests in flight) or ``arrival_rate`` (an open loop:
    requests per second); ``judged`` is False where the level asks for no such figure
    (a closed loop of conversations, whose slots think between turns by design)."""

    kind: str
    asked: float
    achieved: float
    judged: bool = True

    @property
    def share(self) -> float:
        return self.achieved / self.asked if self.asked > 0 else 1.0


def _column(records: Sequence[RequestRecord], name: str) -> np.ndarray:
    """A field of every record (``sent_ns``, ``end_ns``, ``scheduled_ns``, ``n_chunks``:
    the number of output chunks), read from the store's columns where it has them."""
    if isinstance(records, RecordStore | RecordView):
        return records.column(name).astype(np.int64)
    if name == "n_chunks":
        return np.fromiter((len(x.chunk_ns) for x in records), np.int64, len(records))
    return np.fromiter((getattr(x, name) for x in records), np.int64, len(records))


def _ok(records: Sequence[RequestRecord]) -> np.ndarray:
    if isinstance(records, RecordStore | RecordView):
        return records.ok()
    return np.fromiter((x.ok for x in records), bool, len(records))


def _overlap_ns(sent: np.ndarray, end: np.ndarray, lo: int, hi: int) -> int:
    return int(np.clip(np.minimum(end, hi) - np.maximum(sent, lo), 0, None).sum())


def applied_load(results: Sequence[WorkerMeasures]) -> AppliedLoad | None:
    """What the engine got, from the client's send and end times (None: too little to say).

    Closed loop, per worker: over its measured window (its first measured send to its last
    measured end) the time-averaged number of its requests in flight, warm-up and
    cool-down requests included (they are load too: the cool-down keeps every slot busy to
    the last measured end), against its slots; the level's figure is the sum over workers.
    A slot's time between a response's end and its next send (the client's turnaround)
    is what it lacks, except after a failed request: a request that failed at once leaves
    its slot a turnaround that is a large share of the time, and that share is the
    engine's doing, not the client's (such a gap is counted as in flight). With read
    stamps a response's end is when the client read it, so a client slow to read shows
    more in flight than the engine had (the loop-lag rule covers that case).

    Open loop: the measured requests' arrival rate, (n − 1) over the span of their sends,
    against the rate their schedule asked, (n − 1) over the span of their scheduled times
    (a cap's waits move the scheduled times: they are the cap's, not the client's)."""
    closed = [r for r in results if r.closed]
    if closed:
        asked = achieved = 0.0
        for r in closed:
            if not r.records or r.slots < 1:
                continue
            sent, end = _column(r.records, "sent_ns"), _column(r.records, "end_ns")
            lo, hi = int(sent.min()), int(end.max())
            if hi <= lo:
                continue
            busy = _overlap_ns(sent, end, lo, hi)
            ok = _ok(r.records)
            if not ok.all():
                # A slot's next request is due at its previous one's end: that one failed.
                sched = _column(r.records, "scheduled_ns")
                after = np.isin(sched, end[~ok])
                if after.any():
                    busy += _overlap_ns(sched[after], sent[after], lo, hi)
            if r.side_flight:
                side = np.asarray(r.side_flight, dtype=np.int64)
                busy += _overlap_ns(side[:, 0], side[:, 1], lo, hi)
            asked += r.slots
            achieved += busy / (hi - lo)
        if asked <= 0:
            return None
        judged = not any(r.multi_turn for r in closed)
        return AppliedLoad("in_flight", asked, achieved, judged)
    if sum(len(r.records) for r in results) < 3:
        return None
    sent = np.concatenate([_column(r.records, "sent_ns") for r in results])
    sched = np.concatenate([_column(r.records, "scheduled_ns") for r in results])
    sent_span = int(sent.max() - sent.min())
    sched_span = int(sched.max() - sched.min())
    if sent_span <= 0 or sched_span <= 0:
        return None
    n = sent.size - 1
    return AppliedLoad("arrival_rate", n / sched_span * 1e9, n / sent_span * 1e9)


def _stall_reason(
    windows: Sequence[tuple[WorkerMeasures, int, int]],
    touched: int,
    tokens: int,
    kernel: bool,
    th: HealthThresholds,
    cause: str,
) -> str:
    """Why the loop's stalls make the run invalid: how many, the longest, the tokens."""
    share = touched / tokens if tokens else 0.0
    r, start, end = max(windows, key=lambda w: w[2] - w[1])
    at = (start - r.t0_ns) / 1e9
    return (
        f"the client's event loop stalled {len(windows)} time(s), longest "
        f"{(end - start) / 1e6:.0f} ms at {at:.1f} s into the run: {touched} of {tokens} "
        f"tokens ({share:.2%} > {th.max_stalled_tokens:.2%}) "
        + (
            "arrived in a stall behind a later chunk and carry its stamp"
            if kernel
            else "were timestamped in a stall"
        )
        + f", so their times are the client's, not the engine's ({cause})"
    )


def _load_reason(load: AppliedLoad, th: HealthThresholds, cause: str) -> str:
    """Why a load lighter than asked makes the run invalid."""
    if load.kind == "in_flight":
        did = (
            f"the closed loop kept {load.achieved:.1f} requests in flight on average over "
            f"its measured window, {load.share:.0%} of the {load.asked:g} asked"
        )
    else:
        did = (
            f"the open loop sent {load.achieved:.3g} requests/s where its schedule asked "
            f"{load.asked:.3g} ({load.share:.0%})"
        )
    return (
        f"{did} (< {th.min_load_share:.0%}, --client-min-load): the engine got a lighter "
        f"load than asked, the client was slow to send ({cause})"
    )


def assess(results: Sequence[WorkerMeasures], th: HealthThresholds, nproc: int) -> ClientHealth:
    """The client's health over every worker of a run (see the module docstring)."""
    lags = np.array([x for r in results for x in r.schedule_lag_ns], dtype=float) / 1e6
    loop = np.array([x for r in results for x in r.loop_lag_ns], dtype=float) / 1e6
    cpu_s = sum(r.cpu_s for r in results)
    util = max((r.cpu_s / r.wall_s for r in results if r.wall_s > 0), default=0.0)
    s50 = float(np.percentile(lags, 50)) if lags.size else 0.0
    s99 = float(np.percentile(lags, 99)) if lags.size else 0.0
    smax = float(lags.max()) if lags.size else 0.0
    l99 = float(np.percentile(loop, 99)) if loop.size else 0.0
    lmax = float(loop.max()) if loop.size else 0.0
    tokens = sum(int(_column(r.records, "n_chunks").sum()) for r in results)
    touched = sum(stalled_tokens(r.records, r.stalls, r.kernel_stamps) for r in results)
    kernel = bool(results) and all(r.kernel_stamps for r in results)
    closed = any(r.closed for r in results)
    idle_ns = sum(x for r in results if r.closed for x in r.schedule_lag_ns)
    busy_ns = sum(
        int((_column(r.records, "end_ns") - _column(r.records, "sent_ns")).sum())
        for r in results
        if r.closed
    )
    idle = idle_ns / (idle_ns + busy_ns) if idle_ns + busy_ns > 0 else 0.0
    windows = [(r, s, e) for r in results for s, e in r.stalls]
    share = touched / tokens if tokens else 0.0
    reasons = []
    # Lag with a busy process is the client's own load; lag with an idle one means the
    # process did not get the CPU (other work on the machine), which is as fatal.
    cause = (
        "client overloaded"
        if util > 0.5
        else f"client process starved of CPU: busiest at {util:.0%} of a core"
    )
    if closed and idle > th.max_idle_share and s99 > th.max_schedule_lag_p99_ms:
        reasons.append(
            f"the closed loop's slots stood idle {idle:.1%} of the time (> "
            f"{th.max_idle_share:.0%}), waiting for the client to send the next request "
            f"(turnaround P99 {s99:.1f} ms > {th.max_schedule_lag_p99_ms:g} ms): fewer "
            f"requests were in flight than asked ({cause})"
        )
    if not closed and s99 > th.max_schedule_lag_p99_ms:
        reasons.append(
            f"schedule lag P99 {s99:.1f} ms > {th.max_schedule_lag_p99_ms:g} ms: requests "
            f"left later than scheduled ({cause})"
        )
    if not kernel and l99 > th.max_loop_lag_p99_ms:
        reasons.append(
            f"event-loop lag P99 {l99:.1f} ms > {th.max_loop_lag_p99_ms:g} ms: timestamps "
            f"were taken late ({cause})"
        )
    if windows and share > th.max_stalled_tokens:
        reasons.append(_stall_reason(windows, touched, tokens, kernel, th, cause))
    load = applied_load(results)
    if load is not None and load.judged and load.share < th.min_load_share:
        reasons.append(_load_reason(load, th, cause))
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
        stalls=len(windows),
        stalled_tokens=touched,
        stalled_share=share,
        receive_stamps="kernel" if kernel else "read",
        idle_share=idle,
        load_kind="" if load is None else load.kind,
        load_asked=0.0 if load is None else load.asked,
        load_achieved=0.0 if load is None else load.achieved,
    )
