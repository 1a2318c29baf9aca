"""What an engine said about itself over one load level: ``LevelSignals``.

Gauges (running, waiting, KV-cache usage) are the time-weighted mean and the peak of the
scrapes taken while the measured part of the level ran (each scrape stands for the time
around it, to halfway to its neighbours, within the window), with their number
(``gauge_samples``); with fewer than ``MIN_GAUGE_SAMPLES`` they are not shown and
``gauge_note`` says so (a gauge read after the load is not the load's). Counters and
histograms are their change from the scrape before it to the scrape after it: preemptions,
the prefix-cache hit rate (hits over queries; a hit-rate gauge's mean for engines that
publish only that), engine-side queue
time, TTFT, ITL and end-to-end latency (mean, P50 and P99 of the histogram's change,
interpolated within buckets: as coarse as the engine's buckets, and never above what the
exact mean allows, ``mean / (1 - q)``), and prompt and generated
tokens per second. GPU telemetry (``gpu.py``) adds utilisation, memory, power and energy.
Every figure may be None: an engine publishes what it publishes, and ``note`` says why a
level has no signals at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .exposition import Snapshot, quantile
from .names import KIND, detect, lookup


@dataclass(frozen=True, slots=True)
class LevelSignals:
    engines: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    scrapes: int = 0
    note: str | None = None
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    kv_usage_mean: float | None = None
    kv_usage_max: float | None = None
    preemptions: float | None = None
    prefix_hit_rate: float | None = None
    queue_time_mean_ms: float | None = None
    queue_time_p50_ms: float | None = None
    queue_time_p99_ms: float | None = None
    ttft_mean_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    requests: float | None = None
    prompt_tok_s: float | None = None
    generation_tok_s: float | None = None
    seconds: float = 0.0
    gpu: Mapping[str, Any] | None = field(default=None)
    gauge_samples: int = 0
    gauge_note: str | None = None

    @property
    def present(self) -> bool:
        return bool(self.engines) and self.scrapes > 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["engines"] = list(self.engines)
        d["sources"] = list(self.sources)
        d["gpu"] = None if self.gpu is None else dict(self.gpu)
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LevelSignals:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["engines"] = tuple(kw.get("engines", ()))
        kw["sources"] = tuple(kw.get("sources", ()))
        return cls(**kw)


#: The fewest gauge samples in the measured window that a level's gauges are shown from.
MIN_GAUGE_SAMPLES = 3


def _weights(times: Sequence[float], start: float, end: float) -> list[float]:
    """The time each sample at ``times`` stands for: from halfway to the one before (or
    ``start``) to halfway to the one after (or ``end``), never negative."""
    out = []
    for i, t in enumerate(times):
        lo = start if i == 0 else (times[i - 1] + t) / 2
        hi = end if i == len(times) - 1 else (t + times[i + 1]) / 2
        out.append(max(min(hi, end) - max(lo, start), 0.0))
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


class _Window:
    """The scrapes of one level's measured window, read per signal: gauges averaged over
    the samples in it, counters and histograms as the change from before to after."""

    def __init__(
        self, engines: list[str], before: Snapshot, samples: list[Snapshot], after: Snapshot
    ) -> None:
        self.engines = engines
        self.before = before
        self.samples = samples
        self.after = after
        self.weights = _weights([s.t for s in samples], before.t, after.t)

    def gauge(
        self, signal: str, need: int = MIN_GAUGE_SAMPLES
    ) -> tuple[float | None, float | None]:
        """The time-weighted mean and the max of a gauge (None with fewer than ``need``)."""
        names = lookup(self.engines, signal)
        got = [
            (v, w)
            for s, w in zip(self.samples, self.weights, strict=True)
            if (v := s.get(names, ratio=KIND[signal] == "ratio")) is not None
        ]
        if not got or len(got) < need:
            return None, None
        if signal == "kv_usage":
            got = [(v / 100.0 if v > 1.0 else v, w) for v, w in got]  # a percent, not a fraction
        total = sum(w for _, w in got)
        mean = (
            sum(v * w for v, w in got) / total if total > 0 else sum(v for v, _ in got) / len(got)
        )
        return mean, max(v for v, _ in got)

    def counter(self, signal: str) -> float | None:
        """How much a counter grew over the window."""
        names = lookup(self.engines, signal)
        a, b = self.before.get(names), self.after.get(names)
        if a is None or b is None:
            return None
        return max(b - a, 0.0)

    def hist(self, signal: str) -> tuple[float | None, float | None, float | None, float | None]:
        """A histogram's mean, P50, P99 and count over the window."""
        before, after = self.before, self.after
        names = lookup(self.engines, signal)
        got = after.histogram(names)
        if got is None:
            return None, None, None, None
        name, b_after = got
        b_before = before.buckets.get(name)
        count = (after.values.get(name + "_count", 0.0)) - before.values.get(name + "_count", 0.0)
        total = (after.values.get(name + "_sum", 0.0)) - before.values.get(name + "_sum", 0.0)
        mean = total / count if count > 0 else None

        def q(p: float) -> float | None:
            # Within a bucket the interpolation can say little (vLLM's queue-time histogram
            # starts at 0.3 s: a 1 ms queue reads as P99 297 ms). Markov's inequality
            # bounds any quantile by the exact mean: P_q <= mean / (1 - q).
            v = quantile(b_before, b_after, p)
            if v is not None and mean is not None and mean >= 0:
                v = min(v, mean / (1.0 - p))
            return v

        return mean, q(0.5), q(0.99), count if count > 0 else None


def compute(
    before: Snapshot,
    during: Sequence[Snapshot],
    after: Snapshot,
    sources: Sequence[str],
    *,
    note: str | None = None,
    gpu: Mapping[str, Any] | None = None,
) -> LevelSignals:
    """The level's signals from its scrapes (``during`` may be empty for a short level:
    the gauges then come from the scrape after it)."""
    engines = detect(after.names() | before.names())
    if not engines:
        why = note or (
            "no engine signals: /metrics has none of the known engine names (vllm:, sglang:, "
            "trtllm_, dynamo_frontend_): see docs/signals.md to map this engine's"
        )
        return LevelSignals(sources=tuple(sources), scrapes=len(during) + 2, note=why, gpu=gpu)
    samples = list(during)
    secs = max(after.t - before.t, 1e-9)
    window = _Window(engines, before, samples, after)
    out: dict[str, Any] = {"gauge_samples": len(samples)}
    if len(samples) < MIN_GAUGE_SAMPLES:
        out["gauge_note"] = (
            f"{len(samples)} gauge sample(s) in the measured window, fewer than "
            f"{MIN_GAUGE_SAMPLES}: running, waiting and KV use not shown (a shorter "
            "--signals-interval, or a longer level)"
        )
    out.update(_scheduler_signals(window))
    out.update(_latency_signals(window))
    for signal, key in (
        ("prompt_tokens", "prompt_tok_s"),
        ("generation_tokens", "generation_tok_s"),
    ):
        d = window.counter(signal)
        out[key] = None if d is None else d / secs
    return LevelSignals(
        engines=tuple(engines),
        sources=tuple(sources),
        scrapes=len(during) + 2,
        note=note,
        seconds=secs,
        gpu=gpu,
        **out,
    )


def _scheduler_signals(window: _Window) -> dict[str, Any]:
    """Running and waiting requests, KV cache use, preemptions, the prefix-cache hit rate."""
    out: dict[str, Any] = {}
    out["running_mean"], out["running_max"] = window.gauge("running")
    out["waiting_mean"], out["waiting_max"] = window.gauge("waiting")
    out["kv_usage_mean"], out["kv_usage_max"] = window.gauge("kv_usage")
    out["preemptions"] = window.counter("preemptions")
    hits, queries = window.counter("prefix_hits"), window.counter("prefix_queries")
    if hits is not None and queries:
        out["prefix_hit_rate"] = hits / queries
    else:
        out["prefix_hit_rate"] = window.gauge("prefix_hit_rate", need=1)[0]
    if out["prefix_hit_rate"] is None:
        out["prefix_hit_rate"] = window.hist("prefix_hit_hist")[0]  # a router's histogram
    return out


def _latency_signals(window: _Window) -> dict[str, Any]:
    """The engine's own latency histograms (queue time, TTFT, ITL, E2E), in ms."""
    out: dict[str, Any] = {}
    m, p50, p99, _ = window.hist("queue_time")
    out["queue_time_mean_ms"], out["queue_time_p50_ms"], out["queue_time_p99_ms"] = (
        _ms(m), _ms(p50), _ms(p99)
    )  # fmt: skip
    m, p50, p99, n = window.hist("ttft")
    out["ttft_mean_ms"], out["ttft_p50_ms"], out["ttft_p99_ms"] = _ms(m), _ms(p50), _ms(p99)
    out["requests"] = n
    m, p50, _, _ = window.hist("itl")
    out["itl_mean_ms"], out["itl_p50_ms"] = _ms(m), _ms(p50)
    _, p50, p99, _ = window.hist("e2e")
    out["e2e_p50_ms"], out["e2e_p99_ms"] = _ms(p50), _ms(p99)
    return out
