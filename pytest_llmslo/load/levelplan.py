"""A level split into worker plans: how many client processes, which requests each sends
(its share of an open loop's schedule, or of a closed loop's slots), and the time bounds
they share.

``plan_level`` fixes an open loop's schedule up front (``schedule.py``, or a trace's
timestamps) and deals it round-robin, so each worker sees the whole time span at
1/n of the rate and the union of the workers' arrivals is exactly the schedule; a closed
loop's concurrency is split as evenly as it goes. A multi-turn workload's conversations
are dealt by a hash of their id instead (``jobsource.shard_of``), so that a conversation stays
on one worker; an open loop's arrivals go with their conversations. Each
``WorkerPlan`` travels to its worker process whole (``protocol.Hello``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..errors import LoadError
from ..records import LoadLevel
from ..recordstore import DEFAULT_LIMIT
from .backlog import DEFAULT_BUDGET
from .client import ClientSettings
from .job import LoadJob
from .jobsource import JobSpec, shard_of
from .promptlengths import LengthModel
from .schedule import arrival_offsets_ns, expected_arrivals, split_concurrency
from .traces import read_trace

__all__ = ["Bound", "LevelPlan", "Limits", "WorkerPlan", "auto_processes", "plan_level"]


@dataclass(slots=True)
class WorkerPlan:
    """What one worker sends: its jobs, a closed loop's slots or an open loop's cap."""

    worker: int
    jobs: JobSpec
    closed: bool
    slots: int
    max_connections: int | None
    stall_ns: int
    defer_bytes: int = DEFAULT_BUDGET
    cap: int | None = None  # an open loop's cap on requests in flight (this worker's share)
    #: The bytes of decoded records kept in memory, the rest in files (``RecordStore``).
    records_memory: int | None = DEFAULT_LIMIT

    @property
    def settings(self) -> ClientSettings:
        return self.jobs.settings


@dataclass(slots=True)
class Bound:
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


@dataclass(frozen=True, slots=True)
class Limits:
    """The time bounds every worker of a level shares (nanoseconds; ``level_end_ns`` is
    absolute on the shared monotonic clock)."""

    duration_ns: int | None
    grace_ns: int
    level_end_ns: int | None

    @classmethod
    def of(cls, job: LoadJob, level_end_ns: int | None) -> Limits:
        duration = None if job.duration_s is None else int(job.duration_s * 1e9)
        return cls(duration, int(job.grace_s * 1e9), level_end_ns)

    def bound(self) -> Bound:
        return Bound(self.duration_ns, self.grace_ns, self.level_end_ns)


@dataclass(slots=True)
class LevelPlan:
    """A level's plans, one a worker, with what planning learnt: the warm-up in units
    (requests, or conversations of a multi-turn workload) and the offered traffic."""

    plans: list[WorkerPlan]
    units_warm: int
    traffic: dict[str, Any]

    @property
    def processes(self) -> int:
        return len(self.plans)


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


def _schedule(
    job: LoadJob, units_warm: int, total: int | None, traffic: dict[str, Any]
) -> tuple[np.ndarray | None, int, int | None]:
    """An open loop's offsets (None for a closed loop), the warm-up and the total in
    units; a trace's description and the offered rate go into ``traffic``."""
    level, workload = job.level, job.workload
    offsets: np.ndarray | None = None
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
    elif level.mode != "concurrency":
        # An open loop's schedule is fixed up front; bounded by time alone, it holds the
        # arrivals of the duration (a profile's, when it is shorter).
        n = total if total is not None else units_warm + expected_arrivals(level, job.duration_s)
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
    return offsets, units_warm, total


def _processes(job: LoadJob, total: int | None, workers: int | None) -> int:
    level, client = job.level, job.client
    nproc = workers or client.processes
    nproc = nproc or auto_processes(level, job.workload.osl, client.resolved_transport)
    if level.mode == "concurrency":
        nproc = min(nproc, int(level.value))
    if total is not None:
        nproc = min(nproc, total)
    if level.max_concurrency is not None:
        nproc = min(nproc, level.max_concurrency)
    return max(1, nproc)


def _worker_offsets(
    offsets: np.ndarray | None, shards: np.ndarray | None, w: int, nproc: int
) -> np.ndarray | None:
    """Worker ``w``'s share of an open loop's schedule: its conversations' arrivals (by
    their shard), or every ``nproc``-th arrival."""
    if offsets is None:
        return None
    share: np.ndarray = offsets[shards == w] if shards is not None else offsets[w::nproc]
    return share


def plan_level(job: LoadJob, lm: LengthModel, workers: int | None = None) -> LevelPlan:
    """``job``'s level dealt to its workers, with ``lm`` the fitted prompt lengths;
    ``workers``: as many workers as that (remote ones), where the level has enough to
    deal, instead of the client's processes."""
    level, workload = job.level, job.workload
    closed = level.mode == "concurrency"
    # A multi-turn workload's unit is a conversation: the request counts become counts of
    # conversations of ``turns`` turns (rounded up), and a level's value counts them too.
    per = workload.turns if workload.multi_turn else 1
    units_warm = -(-job.warmup // per)
    total = None if job.requests is None else units_warm + -(-job.requests // per)
    traffic: dict[str, Any] = {}
    offsets, units_warm, total = _schedule(job, units_warm, total, traffic)
    nproc = _processes(job, total, workers)
    slots = split_concurrency(int(level.value), nproc) if closed else [0] * nproc
    caps: list[int | None] = (
        list(split_concurrency(level.max_concurrency, nproc))
        if level.max_concurrency is not None
        else [None] * nproc
    )
    rate = 0.0 if closed else float(traffic.get("offered_req_s") or level.value)
    per_worker_rate = rate / nproc
    # Conversations are dealt by a hash of their id (``jobsource.shard_of``), requests in turn.
    shards = None
    if workload.multi_turn and nproc > 1:
        n_ids = len(offsets) if offsets is not None else total
        if n_ids is not None:
            shards = shard_of(np.arange(n_ids, dtype=np.int64), workload.seed, nproc)
    plans = [
        WorkerPlan(
            worker=w,
            jobs=JobSpec(
                settings=job.client,
                workload=workload,
                length_model=lm,
                start=w,
                step=nproc,
                stop=total,
                warmup=units_warm,
                offsets=_worker_offsets(offsets, shards, w, nproc),
                low_water=max(32, 2 * slots[w], math.ceil(2 * per_worker_rate)),
                shard=(w, nproc) if workload.multi_turn and nproc > 1 else None,
                spares=slots[w] if closed else 0,
            ),
            closed=closed,
            slots=slots[w],
            max_connections=slots[w] if closed else caps[w],
            stall_ns=int(job.health.max_loop_lag_p99_ms * 1e6),
            defer_bytes=0 if job.early_stop is not None else job.defer_bytes,
            cap=caps[w],
            records_memory=job.records_memory,
        )
        for w in range(nproc)
    ]
    return LevelPlan(plans, units_warm, traffic)
