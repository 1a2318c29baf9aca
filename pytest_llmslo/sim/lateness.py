"""How late a server's token writes are against their schedule (write time - due time).

Both of the project's servers measure it on every token they write, to tell their own slip
from the timing they model: the sim engine (``server.py``) and the truth server
(``truth_server.py``). They keep it in two shapes, for two readers:

- ``LatenessStats`` (the sim engine, seconds): a histogram on ``LATENESS_BUCKETS_S`` for
  its ``/metrics`` (``llmslo_sim_emit_lateness_seconds``, ``metrics_exposition.py``), with
  the largest and last value, the writes later than the warning threshold, the resyncs of
  the simulated clock and whether the last step ended behind;
- ``LatenessHistogram`` (the truth server, nanoseconds): 0.1 ms bins up to 200 ms, for
  the percentiles its ``GET /stats`` reports; cheap enough that the truth server's timer
  updates it inline for every token. ``SharedStats`` holds the counters and histograms of
  several truth server processes in one shared block: each publishes its own, any of
  them reads the totals or resets them for all.
"""

from __future__ import annotations

import mmap
import resource
import time
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

from .latencies import Histogram

# -- the sim engine's ------------------------------------------------------------------

LATENESS_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


@dataclass(slots=True)
class LatenessStats:
    """How late token writes were against the schedule (seconds)."""

    hist: Histogram = field(default_factory=lambda: Histogram(LATENESS_BUCKETS_S))
    max: float = 0.0
    last: float = 0.0
    late: int = 0
    resyncs: int = 0
    behind: bool = False

    @property
    def count(self) -> int:
        return self.hist.n

    @property
    def total(self) -> float:
        return self.hist.total

    def add(self, v: float, warn_s: float) -> None:
        if v < 0:
            v = 0.0
        self.hist.observe(v)
        self.last = v
        if v > self.max:
            self.max = v
        if v > warn_s:
            self.late += 1


# -- the truth server's -----------------------------------------------------------------

HIST_BIN_NS = 100_000  # 0.1 ms
HIST_BINS = 2000  # up to 200 ms; later ones land in the last bin


class LatenessHistogram:
    """Write time - due time of tokens, as a histogram (cheap per token)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.sum_ns = 0
        self.max_ns = 0
        self.hist = [0] * HIST_BINS

    def add(self, lat_ns: int) -> None:
        self.count += 1
        self.sum_ns += lat_ns
        if lat_ns > self.max_ns:
            self.max_ns = lat_ns
        b = lat_ns // HIST_BIN_NS
        self.hist[b if 0 <= b < HIST_BINS else (HIST_BINS - 1 if b > 0 else 0)] += 1

    def percentile_ms(self, q: float) -> float:
        if not self.count:
            return 0.0
        target = q / 100.0 * self.count
        acc = 0
        for i, c in enumerate(self.hist):
            acc += c
            if acc >= target:
                return (i + 0.5) * HIST_BIN_NS / 1e6
        return self.max_ns / 1e6

    def to_dict(self) -> dict[str, float]:
        return {
            "count": self.count,
            "mean_ms": self.sum_ns / self.count / 1e6 if self.count else 0.0,
            "p50_ms": self.percentile_ms(50),
            "p99_ms": self.percentile_ms(99),
            "max_ms": self.max_ns / 1e6,
        }


# A worker's row in the shared stats block (int64 slots), then its two histograms.
_F_COUNT, _F_SUM, _F_MAX, _F_FCOUNT, _F_FSUM, _F_FMAX, _F_REQ, _F_ACTIVE, _F_CPU, _F_SYS = range(10)
_ROW_HEAD = 12
_ROW = _ROW_HEAD + 2 * HIST_BINS


class SharedStats:
    """Stats of several server processes in one shared anonymous mmap (made before fork).

    Header: reset generation, reset time. Then one row per worker of cumulative counters
    (published every 100 ms and whenever the worker answers ``/stats``) and one baseline
    row per worker, the rows as they were at the last reset: a reset never races with
    the counting, it only moves the baseline (other workers' rows are up to 100 ms old
    then, which is exact when the reset falls in an idle moment, as between benchmark
    levels). Maxima restart when a worker sees the new generation.
    """

    _HEAD = 2

    def __init__(self, workers: int) -> None:
        import numpy as np

        self.workers = workers
        self.mm = mmap.mmap(-1, 8 * (self._HEAD + 2 * workers * _ROW))
        self.arr = np.frombuffer(self.mm, dtype=np.int64)
        self.arr[1] = perf_counter_ns()

    def row(self, w: int) -> Any:
        start = self._HEAD + w * _ROW
        return self.arr[start : start + _ROW]

    def base(self, w: int) -> Any:
        start = self._HEAD + (self.workers + w) * _ROW
        return self.arr[start : start + _ROW]

    def since_reset(self) -> list[Any]:
        """Each worker's counters minus its baseline (maxima as they are)."""
        out = []
        for w in range(self.workers):
            d = self.row(w) - self.base(w)
            d[_F_MAX] = self.row(w)[_F_MAX]
            d[_F_FMAX] = self.row(w)[_F_FMAX]
            d[_F_ACTIVE] = self.row(w)[_F_ACTIVE]
            out.append(d)
        return out

    @property
    def generation(self) -> int:
        """Counts the resets; a worker that sees a new one restarts its maxima."""
        return int(self.arr[0])

    def publish(
        self,
        worker: int,
        late: LatenessHistogram,
        first: LatenessHistogram,
        requests: int,
        active: int,
    ) -> None:
        """Write a worker's cumulative counters and histograms (and this process's CPU
        time) into its row."""
        row = self.row(worker)
        row[:_ROW_HEAD] = [
            late.count,
            late.sum_ns,
            late.max_ns,
            first.count,
            first.sum_ns,
            first.max_ns,
            requests,
            active,
            int(time.process_time() * 1e9),
            int(resource.getrusage(resource.RUSAGE_SELF).ru_stime * 1e9),
            0,
            0,
        ]
        row[_ROW_HEAD : _ROW_HEAD + HIST_BINS] = late.hist
        row[_ROW_HEAD + HIST_BINS :] = first.hist

    def totals(self) -> dict[str, Any]:
        """Every worker's stats since the last reset, together: requests, those active,
        token and first-token lateness, CPU and system time, and CPU use in cores."""
        rows = self.since_reset()
        wall = (perf_counter_ns() - int(self.arr[1])) / 1e9
        cpu = sum(int(r[_F_CPU]) for r in rows) / 1e9
        return {
            "requests": sum(int(r[_F_REQ]) for r in rows),
            "active": sum(int(r[_F_ACTIVE]) for r in rows),
            "lateness": _merged(rows, _ROW_HEAD, _F_COUNT, _F_SUM, _F_MAX),
            "first_token_lateness": _merged(
                rows, _ROW_HEAD + HIST_BINS, _F_FCOUNT, _F_FSUM, _F_FMAX
            ),
            "cpu_s": cpu,
            "sys_s": sum(int(r[_F_SYS]) for r in rows) / 1e9,
            "cpu_util": cpu / wall if wall > 0 else 0.0,  # all workers, in cores
        }

    def reset(self) -> None:
        """Every worker's counting starts again: its baseline moves to its row as it is,
        and a new generation starts (its maxima restart when the worker sees it)."""
        for w in range(self.workers):
            self.base(w)[:] = self.row(w)
        self.arr[1] = perf_counter_ns()
        self.arr[0] += 1


def _merged(rows: list[Any], base: int, count: int, total: int, mx: int) -> dict[str, float]:
    """One histogram of the workers' ``rows`` (its bins from slot ``base``, its count, sum
    and maximum in slots ``count``, ``total`` and ``mx``), as ``LatenessHistogram.to_dict``."""
    st = LatenessHistogram()
    for r in rows:
        st.count += int(r[count])
        st.sum_ns += int(r[total])
        st.max_ns = max(st.max_ns, int(r[mx]))
        for i, c in enumerate(r[base : base + HIST_BINS].tolist()):
            if c:
                st.hist[i] += c
    return st.to_dict()
