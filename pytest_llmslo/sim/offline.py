"""Closed-loop sweeps of a sim deployment on the simulated clock alone: no server, no
client, no wall clock. What the sim engine's timing model gives for a workload at each
concurrency, in a fraction of a second per level, deterministic for a seed.

It is what ``docs/sim.md``'s tables and ``benchmarks/sim_fidelity.py`` are computed with,
and what the sim's tests check profiles against. The end-to-end sweeps through the load
generator (``benchmarks/sim_sweep.py``, the example suite) add the client, the HTTP path
and the host's jitter on top of the same model.

Workloads (``Workload``): input and output lengths drawn as the load generator draws them
(fixed, or lognormal for ShareGPT-like spreads), optionally over ``prefixes`` shared prompt
prefixes of ``prefix_len`` tokens (system prompts, RAG documents, multi-turn histories)
that a prefix cache and a KV-aware router can reuse. Every user sends its next request
1 ms after the last one finished.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..load.promptlengths import draw_lengths
from .cluster import Emission
from .profiles import Profile
from .scheduler import SimRequest
from .tokens import block_hashes

__all__ = ["KneeSearch", "LevelResult", "Slo", "Workload", "closed_loop", "find_knee", "sweep"]

_TURNAROUND_S = 0.001


@dataclass(frozen=True, slots=True)
class Workload:
    """Request lengths as the load generator draws them (``load.workload.draw_lengths``:
    mean and standard deviation, ``fixed`` or ``lognormal``, ...) and shared prefixes."""

    isl: int = 512
    osl: int = 256
    isl_stddev: float = 0.0
    osl_stddev: float = 0.0
    distribution: str = "fixed"
    prefixes: int = 0
    prefix_len: int = 0
    seed: int = 0

    def lengths(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        isl = draw_lengths(rng, self.isl, self.isl_stddev, self.distribution, n)
        osl = draw_lengths(rng, self.osl, self.osl_stddev, self.distribution, n)
        return isl, osl

    def describe(self) -> str:
        if self.distribution == "fixed" or not (self.isl_stddev or self.osl_stddev):
            text = f"ISL {self.isl} / OSL {self.osl}"
        else:
            text = (
                f"{self.distribution} ISL {self.isl}±{self.isl_stddev:g} / "
                f"OSL {self.osl}±{self.osl_stddev:g}"
            )
        if self.prefixes:
            text += f", {self.prefixes} shared prefixes of {self.prefix_len} tokens"
        return text

    def prefix_ids(self, n: int) -> np.ndarray:
        """Which shared prefix each of ``n`` requests starts with (uniform, seeded)."""
        if not self.prefixes:
            return np.zeros(n, dtype=np.int64)
        return np.random.default_rng((self.seed, 1)).integers(0, self.prefixes, n)

    def request(
        self, i: int, isl: int, osl: int, block_size: int, caching: bool, prefix: int = 0
    ) -> SimRequest:
        hashes: tuple[int, ...] = ()
        if caching:
            tokens: list[str] = []
            if self.prefixes:
                p = prefix
                tokens = [f"p{p}.{j}" for j in range(min(self.prefix_len, isl - 1))]
            tokens += [f"u{i}.{j}" for j in range(isl - len(tokens))]
            hashes = block_hashes(tokens, block_size)
        return SimRequest(str(i), int(isl), int(osl), block_hashes=hashes)


@dataclass(slots=True)
class LevelResult:
    """One level of a sweep: per measured request its TTFT and end-to-end latency, every
    token gap, and the output throughput over the window in which every user ran a
    measured request."""

    profile: str
    concurrency: int
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    gaps_ms: np.ndarray
    tok_s: float
    #: Per measured request (aligned with ``ttft_ms``): the median of its own token gaps.
    own_itl_ms: np.ndarray = field(default_factory=lambda: np.empty(0))
    transfers: int = 0
    #: Prompt tokens served from a prefix cache / looked up (None: nothing looked up).
    prefix_hit_rate: float | None = None
    notes: list[str] = field(default_factory=list)

    def p(self, values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q)) if values.size else math.nan

    @property
    def ttft_p50(self) -> float:
        return self.p(self.ttft_ms, 50)

    @property
    def ttft_p99(self) -> float:
        return self.p(self.ttft_ms, 99)

    @property
    def itl_p50(self) -> float:
        return self.p(self.gaps_ms, 50)

    def attainment(self, slo: Slo) -> float:
        """Share of requests that meet ``slo`` on their own: TTFT, and the median of their
        own token gaps (as the plugin's per-request thresholds)."""
        if not self.ttft_ms.size:
            return math.nan
        good = self.ttft_ms < slo.ttft_p99_ms
        if slo.itl_p50_ms is not None:
            good &= self.own_itl_ms < slo.itl_p50_ms
        return float(good.mean())

    def meets(self, slo: Slo) -> bool:
        """The aggregate gates: TTFT P99 and ITL P50 (over every gap) under the SLO."""
        if not self.ttft_ms.size:
            return False
        return self.ttft_p99 < slo.ttft_p99_ms and (
            slo.itl_p50_ms is None or self.itl_p50 < slo.itl_p50_ms
        )


@dataclass(frozen=True, slots=True)
class Slo:
    """TTFT P99 < ``ttft_p99_ms`` and, unless None, ITL P50 < ``itl_p50_ms``."""

    ttft_p99_ms: float = 500.0
    itl_p50_ms: float | None = 30.0

    def describe(self) -> str:
        text = f"TTFT P99 < {self.ttft_p99_ms:g} ms"
        return text if self.itl_p50_ms is None else f"{text}, ITL P50 < {self.itl_p50_ms:g} ms"


def closed_loop(
    profile: Profile,
    concurrency: int,
    workload: Workload = Workload(),
    *,
    measured: int = 400,
    warmup_rounds: int = 2,
) -> LevelResult:
    """``concurrency`` users, each sending its next request as its last one finished, on
    a fresh deployment of ``profile``; ``warmup_rounds`` x concurrency requests first,
    not measured."""
    cluster = profile.cluster()
    bs = cluster.block_size
    caching = cluster.enable_prefix_caching
    warm = warmup_rounds * concurrency
    total = warm + measured
    isls, osls = workload.lengths(total)
    # The prefixes' blocks may not leave room: a prompt is at least its prefix plus one.
    if workload.prefixes:
        isls = np.maximum(isls, workload.prefix_len + 1)
    prefix_ids = workload.prefix_ids(total)
    made = 0
    ready: list[float] = [0.0] * concurrency
    now = 0.0
    tally = _Tally(warm)
    window_start: float | None = None
    window_end: float | None = None
    while True:
        ready.sort()
        while ready and ready[0] <= now and made < total:
            ready.pop(0)
            req = workload.request(
                made, int(isls[made]), int(osls[made]), bs, caching, int(prefix_ids[made])
            )
            cluster.submit(req, now)
            if made == warm + concurrency - 1:
                window_start = now
            if made == total - 1:
                window_end = now
            made += 1
        t = cluster.next_event_s()
        if t is None:
            if not ready or made >= total:
                break
            now = max(now, ready[0])
            continue
        if ready and made < total and ready[0] < t:
            now = ready[0]
            continue
        now = t
        for e in cluster.advance(now).emitted:
            tally.token(e)
            if e.last:
                ready.append(e.at_s + _TURNAROUND_S)
    start = window_start or 0.0
    end = window_end or now
    inside = sum(1 for s in tally.stamps if start <= s < end)
    tok_s = inside / (end - start) if end > start else math.nan
    return LevelResult(
        profile=profile.name,
        concurrency=concurrency,
        ttft_ms=np.asarray(tally.ttft) * 1e3,
        e2e_ms=np.asarray(tally.e2e) * 1e3,
        gaps_ms=np.asarray(tally.gaps) * 1e3,
        tok_s=tok_s,
        own_itl_ms=np.asarray(tally.own_itl) * 1e3,
        transfers=cluster.transfers,
        prefix_hit_rate=cluster.prefix_hit_rate(),
    )


class _Tally:
    """The latencies of a closed loop's measured requests (those from index ``warm`` on),
    token by token: TTFT, E2E, every gap, each request's own median gap, every token's
    time."""

    def __init__(self, warm: int) -> None:
        self.warm = warm
        self.ttft: list[float] = []
        self.e2e: list[float] = []
        self.gaps: list[float] = []
        self.own_itl: list[float] = []
        self.stamps: list[float] = []
        self._last_token: dict[SimRequest, float] = {}
        self._own: dict[SimRequest, list[float]] = {}

    def token(self, e: Emission) -> None:
        """Count one emitted token."""
        if int(e.req.rid) >= self.warm:
            self.stamps.append(e.at_s)
            if e.index == 0:
                self.ttft.append(e.at_s - e.req.arrival_s)
                self._own[e.req] = []
            else:
                gap = e.at_s - self._last_token[e.req]
                self.gaps.append(gap)
                self._own[e.req].append(gap)
            if e.last:
                self.e2e.append(e.at_s - e.req.arrival_s)
                mine = self._own.pop(e.req)
                self.own_itl.append(float(np.median(mine)) if mine else 0.0)
        self._last_token[e.req] = e.at_s
        if e.last:
            self._last_token.pop(e.req, None)


def sweep(
    profile: Profile,
    levels: Sequence[int] = (8, 16, 32, 48, 64),
    workload: Workload = Workload(),
    **kw: int,
) -> list[LevelResult]:
    """``closed_loop`` at each level (each on a fresh deployment)."""
    return [closed_loop(profile, c, workload, **kw) for c in levels]


@dataclass(slots=True)
class KneeSearch:
    """The highest concurrency (a multiple of ``step``) whose level meets the SLO, and the
    first one above it that does not (None when the search reached ``limit``)."""

    knee: LevelResult | None
    first_failure: LevelResult | None
    probes: list[LevelResult]


def find_knee(
    profile: Profile,
    workload: Workload = Workload(),
    slo: Slo = Slo(),
    *,
    step: int = 4,
    limit: int = 512,
    measured: int = 400,
) -> KneeSearch:
    """Bisect the concurrency (in multiples of ``step`` up to ``limit``) for the knee of
    ``profile`` under ``slo``, assuming a level that misses it has none above that meets
    it. Each probe is a ``closed_loop`` on a fresh deployment."""
    runs: dict[int, LevelResult] = {}

    def run(k: int) -> LevelResult:
        if k not in runs:
            runs[k] = closed_loop(profile, k * step, workload, measured=measured)
        return runs[k]

    lo, hi = 0, limit // step + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid).meets(slo):
            lo = mid
        else:
            hi = mid
    probes = [runs[k] for k in sorted(runs)]
    return KneeSearch(
        knee=runs.get(lo) if lo else None,
        first_failure=runs.get(hi),
        probes=probes,
    )
