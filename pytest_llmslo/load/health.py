"""The load generator checks itself: was the client, not the engine, the bottleneck?

Each worker measures, during the run:

- schedule lag: sent − scheduled of every request;
- event-loop lag: a ticker every 10 ms notes how late it wakes; a wake later than
  ``max_loop_lag_p99_ms`` is a *stall* window (from when it should have woken to when it
  did): a read that arrived meanwhile was timestamped only after it;
- CPU: process time over wall time.

``assess`` turns them into a ``ClientHealth``. A run is invalid when the schedule lag P99,
the loop lag P99 or a process's CPU is above its threshold, *or* when stalls touched more
than ``max_stalled_tokens`` (0.1 %) of the streamed tokens. The last check is what a P99
misses: one stall of two seconds in a forty-second run leaves the loop-lag P99 untouched
while it turns a few hundred first tokens into a TTFT P99 of seconds, which must not be
reported as the engine's. Its reason says when the longest stall was, for how long, and
how many tokens it touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..records import ClientHealth, RequestRecord

__all__ = ["HealthThresholds", "WorkerMeasures", "assess", "stalled_tokens"]


@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """When a run is invalid because the client was the bottleneck.

    - schedule lag P99 above ``max_schedule_lag_p99_ms``: requests left later than planned,
      so an open loop's rate and a closed loop's concurrency were not what was asked;
    - event-loop lag P99 above ``max_loop_lag_p99_ms``: callbacks (and so chunk timestamps)
      ran that late, which would show up as TTFT and ITL; a single wake later than it is a
      stall window;
    - tokens timestamped inside stall windows above ``max_stalled_tokens`` of all tokens;
    - CPU above ``max_cpu_util`` of a core in any client process: the loop had no slack.
    """

    max_schedule_lag_p99_ms: float = 10.0
    max_loop_lag_p99_ms: float = 10.0
    max_cpu_util: float = 0.9
    max_stalled_tokens: float = 0.001

    def to_dict(self) -> dict[str, float]:
        return {
            "max_schedule_lag_p99_ms": self.max_schedule_lag_p99_ms,
            "max_loop_lag_p99_ms": self.max_loop_lag_p99_ms,
            "max_cpu_util": self.max_cpu_util,
            "max_stalled_tokens": self.max_stalled_tokens,
        }


class WorkerMeasures(Protocol):
    """What each worker hands over (``runner._WorkerResult`` has these)."""

    records: list[RequestRecord]
    schedule_lag_ns: list[int]
    loop_lag_ns: list[int]
    stalls: list[tuple[int, int]]
    cpu_s: float
    wall_s: float
    t0_ns: int


def stalled_tokens(records: Sequence[RequestRecord], stalls: Sequence[tuple[int, int]]) -> int:
    """How many chunk timestamps of ``records`` lie inside one of the ``stalls`` windows
    ``(start_ns, end_ns]`` (the windows of one worker, which took those timestamps)."""
    if not stalls or not records:
        return 0
    flat = np.concatenate([np.frombuffer(r.chunk_ns, dtype=np.int64) for r in records])
    if flat.size == 0:
        return 0
    flat.sort()
    total = 0
    for start, end in stalls:
        total += int(np.searchsorted(flat, end, "right") - np.searchsorted(flat, start, "right"))
    return total


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
    tokens = sum(len(rec.chunk_ns) for r in results for rec in r.records)
    touched = sum(stalled_tokens(r.records, r.stalls) for r in results)
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
    if windows and share > th.max_stalled_tokens:
        worst = max(windows, key=lambda w: w[2] - w[1])
        r, start, end = worst
        at = (start - r.t0_ns) / 1e9
        reasons.append(
            f"the client's event loop stalled {len(windows)} time(s), longest "
            f"{(end - start) / 1e6:.0f} ms at {at:.1f} s into the run: {touched} of {tokens} "
            f"tokens ({share:.2%} > {th.max_stalled_tokens:.2%}) were timestamped in a stall, "
            f"so their times are the client's, not the engine's ({cause})"
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
        stalls=len(windows),
        stalled_tokens=touched,
        stalled_share=share,
    )
