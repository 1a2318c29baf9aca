"""How late a server's token writes are against their schedule (write time - due time).

The sim engine (``server.py``) measures it on every token it writes, to tell its own slip
from the timing it models: ``LatenessStats`` (seconds) keeps a histogram on
``LATENESS_BUCKETS_S`` for its ``/metrics`` (``llmslo_sim_emit_lateness_seconds``,
``metrics_exposition.py``), with the largest and last value, the writes later than the
warning threshold, the resyncs of the simulated clock and whether the last step ended
behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
