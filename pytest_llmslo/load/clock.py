"""One clock for a level's workers: each remote worker's offset to the parent's clock.

A remote worker's timestamps are on its own monotonic clock, whose epoch (the host's boot,
or a time namespace's offset) has nothing to do with the parent's. The parent measures the
offset as NTP does (RFC 5905, section 8), from four stamps of one probe: it sends a
``Ping`` at ``t1`` (its clock), the worker receives it at ``t2`` and answers at ``t3``
(the worker's clock), the answer arrives at ``t4`` (the parent's clock). Then

    offset = ((t2 - t1) + (t3 - t4)) / 2      (worker clock - parent clock)
    rtt    = (t4 - t1) - (t3 - t2)

and the true offset lies within ``rtt / 2`` of the estimate whatever the two directions'
delays are (each is at least 0 and they sum to ``rtt``). Of several probes the one with
the smallest round trip is kept (the least queued; ``best_offset``): its ``rtt / 2`` is the
offset's *uncertainty*.

The offset is measured before and after each level (``ClockLink``); a record's times are
moved by the offset interpolated at its send time, so a clock that drifts during a level is
followed, and a record's own latencies (TTFT, ITL, ...) never change: they are differences
of stamps of one worker. What the offset moves is where a worker's requests sit against the
others' and the parent's: the merged arrival process, the level's span and throughput, its
time series. The uncertainty reported for a worker is the larger of the two measurements'
(``ClockLink.uncertainty_ns``); above the health threshold (``max_clock_uncertainty_ms``)
the level is invalid (``runner``).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..records import RequestRecord

__all__ = ["ClockLink", "ClockOffset", "ClockSample", "best_offset", "shift_record", "shift_spans"]

#: Probes per measurement: the minimum round trip of 16 is close to the path's floor.
PROBES = 16


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One probe's four stamps: ``t1``/``t4`` on the parent's clock, ``t2``/``t3`` on the
    worker's."""

    t1: int
    t2: int
    t3: int
    t4: int

    @property
    def offset_ns(self) -> float:
        return ((self.t2 - self.t1) + (self.t3 - self.t4)) / 2

    @property
    def rtt_ns(self) -> int:
        return (self.t4 - self.t1) - (self.t3 - self.t2)


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """A worker's clock against the parent's: ``offset_ns`` (worker - parent), within
    ``uncertainty_ns`` (half the kept probe's round trip), measured at ``at_ns`` (the
    parent's clock) from ``samples`` probes."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    at_ns: int
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset_ms": self.offset_ns / 1e6,
            "uncertainty_ms": self.uncertainty_ns / 1e6,
            "rtt_ms": self.rtt_ns / 1e6,
            "samples": self.samples,
        }


def best_offset(samples: Sequence[ClockSample]) -> ClockOffset:
    """The offset of the probe with the smallest round trip (see the module docstring)."""
    if not samples:
        raise ValueError("no clock probes to estimate an offset from")
    best = min(samples, key=lambda s: s.rtt_ns)
    rtt = max(best.rtt_ns, 0)
    return ClockOffset(
        offset_ns=round(best.offset_ns),
        uncertainty_ns=-(-rtt // 2),
        rtt_ns=rtt,
        at_ns=(best.t1 + best.t4) // 2,
        samples=len(samples),
    )


@dataclass(frozen=True, slots=True)
class ClockLink:
    """A worker's offset before and after a level (``after`` None: the worker was lost, or
    the level was cut before it could be measured again)."""

    before: ClockOffset
    after: ClockOffset | None = None

    @property
    def uncertainty_ns(self) -> int:
        after = 0 if self.after is None else self.after.uncertainty_ns
        return max(self.before.uncertainty_ns, after)

    @property
    def drift_ns(self) -> int:
        """How far the offset moved over the level."""
        return 0 if self.after is None else self.after.offset_ns - self.before.offset_ns

    def offset_at(self, worker_ns: int) -> int:
        """The offset at ``worker_ns`` (the worker's clock): interpolated between the two
        measurements, held constant outside them."""
        b, a = self.before, self.after
        if a is None or a.at_ns == b.at_ns:
            return b.offset_ns
        t = worker_ns - b.offset_ns  # near enough on the parent's clock to interpolate
        frac = min(max((t - b.at_ns) / (a.at_ns - b.at_ns), 0.0), 1.0)
        return round(b.offset_ns + frac * (a.offset_ns - b.offset_ns))

    def to_parent(self, worker_ns: int) -> int:
        """``worker_ns`` on the parent's clock."""
        return worker_ns - self.offset_at(worker_ns)

    def to_worker(self, parent_ns: int) -> int:
        """``parent_ns`` on the worker's clock, by the offset before the level."""
        return parent_ns + self.before.offset_ns

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
            "uncertainty_ms": self.uncertainty_ns / 1e6,
            "drift_ms": self.drift_ns / 1e6,
        }


def shift_record(rec: RequestRecord, delta_ns: int) -> RequestRecord:
    """``rec`` with every timestamp moved by ``-delta_ns`` (a worker's offset), its
    latencies unchanged."""
    if not delta_ns:
        return rec
    chunks = np.frombuffer(rec.chunk_ns, dtype=np.int64) - delta_ns
    first = rec.first_content_ns
    return dataclasses.replace(
        rec,
        scheduled_ns=rec.scheduled_ns - delta_ns,
        sent_ns=rec.sent_ns - delta_ns,
        end_ns=rec.end_ns - delta_ns,
        chunk_ns=array("q", chunks.tobytes()),
        first_content_ns=None if first is None else first - delta_ns,
    )


def shift_spans(spans: Sequence[tuple[int, int]], delta_ns: int) -> list[tuple[int, int]]:
    """(start, end) spans moved by ``-delta_ns``."""
    return [(s - delta_ns, e - delta_ns) for s, e in spans]
