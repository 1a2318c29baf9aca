"""The sim engine's request latency histograms, under vLLM's names (v0.11,
``vllm/v1/metrics/loggers.py``): ``vllm:request_queue_time_seconds`` (arrival at the
engine to first scheduled), ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds`` (one observation per token after the first) and
``vllm:e2e_request_latency_seconds``, all on the simulated clock, so a client can set the
engine's own figures against its measurements (``signals/``).

The bounds are finer than vLLM's (whose TTFT bounds go 0.1, 0.25, 0.5, 0.75 s, its first
queue-time bound is 0.3 s and its ITL bounds 10, 25, 50 ms), so that the percentiles a
client reads from them come within a few percent of its own at the sim's scales.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

TTFT_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.125, 0.15, 0.175, 0.2,
    0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
QUEUE_BOUNDS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3,
    0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
ITL_BOUNDS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.012, 0.014, 0.016, 0.018, 0.02, 0.025, 0.03, 0.035,
    0.04, 0.05, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
)  # fmt: skip
E2E_BOUNDS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    __slots__ = ("bounds", "counts", "n", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.counts[bisect_left(self.bounds, v)] += 1
        self.total += v
        self.n += 1

    def lines(self, name: str, help_: str, labels: str) -> list[str]:
        out = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        cum = 0
        for b, c in zip(self.bounds, self.counts, strict=False):
            cum += c
            out.append(f'{name}_bucket{{{labels},le="{b}"}} {cum}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


class RequestLatencies:
    """Observed per emission (``emitted``); rendered by ``lines``."""

    def __init__(self) -> None:
        self.queue = Histogram(QUEUE_BOUNDS)
        self.ttft = Histogram(TTFT_BOUNDS)
        self.itl = Histogram(ITL_BOUNDS)
        self.e2e = Histogram(E2E_BOUNDS)
        self._last: dict[object, float] = {}

    def emitted(
        self, req: object, index: int, at_s: float, last: bool, arrival_s: float,
        first_scheduled_s: float | None,
    ) -> None:  # fmt: skip
        """Token ``index`` of ``req`` was written at ``at_s`` (simulated seconds)."""
        if index == 0:
            self.ttft.observe(max(at_s - arrival_s, 0.0))
            sched = first_scheduled_s if first_scheduled_s is not None else at_s
            self.queue.observe(max(sched - arrival_s, 0.0))
        else:
            prev = self._last.get(req)
            if prev is not None:
                self.itl.observe(max(at_s - prev, 0.0))
        if last:
            self._last.pop(req, None)
            self.e2e.observe(max(at_s - arrival_s, 0.0))
        else:
            self._last[req] = at_s

    def forget(self, req: object) -> None:
        """A request that ended without its last token (aborted)."""
        self._last.pop(req, None)

    def lines(self, labels: str) -> list[str]:
        return [
            *self.queue.lines(
                "vllm:request_queue_time_seconds",
                "Time from arrival at the engine to first scheduled (simulated).",
                labels,
            ),
            *self.ttft.lines(
                "vllm:time_to_first_token_seconds", "Engine-side TTFT (simulated).", labels
            ),
            *self.itl.lines(
                "vllm:inter_token_latency_seconds", "Engine-side ITL (simulated).", labels
            ),
            *self.e2e.lines(
                "vllm:e2e_request_latency_seconds", "Engine-side E2E latency (simulated).", labels
            ),
        ]
