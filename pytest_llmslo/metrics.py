"""Records -> numbers: per-request latencies, token gaps, throughput, goodput and the
confidence bounds that say whether a percentile can be trusted.

Every definition lives here once, with its formula. Timestamps in the records are int
nanoseconds from ``time.perf_counter_ns()``; every latency this module returns is in
milliseconds (float64), every rate per second.

Per request (completed requests only; a failed request has NaN everywhere):

- ``ttft``  = first output chunk (content *or* reasoning) − request sent
- ``ttfot`` = first *content* chunk − request sent (time to first output token of a
  reasoning model; equal to ``ttft`` for other models; NaN when no content came)
- ``e2e``   = last byte − request sent
- ``tpot``  = (e2e − ttft) / (output_tokens − 1); NaN when output_tokens < 2.
  ``output_tokens`` is what the request is credited (``RequestRecord.credit``): the
  server's ``usage.completion_tokens`` when it agrees with the tokens that streamed (the
  per-chunk counts the server gave, else one per chunk; a tolerance of 2 tokens or 5 %),
  else the streamed tokens; never more than the ``max_tokens`` the request sent.
- ``itl``   = the gaps between successive output chunks (content and reasoning alike),
  one value per *token*: a gap is divided evenly over the tokens the later chunk carries
  (see :func:`token_gaps` for the rule when the server's per-chunk counts are inexact).

Per run:

- throughput over a window (``throughput_window``): for an open loop, and a closed loop
  of less than one wave, the measured window ``run.start_ns .. run.end_ns`` (falling back
  to the span of the records when it is empty): ``output_tok_s`` = Σ output_tokens of
  completed requests / window, ``total_tok_s`` adds their prompt tokens, ``req_s`` =
  completed requests / window. For a closed loop at concurrency c, the *steady* window from
  the c-th measured send to the last one, in which every slot runs a measured request:
  ``output_tok_s`` = the output tokens of completed requests whose chunks arrived in it /
  its length, ``req_s`` = the completed requests that ended in it / its length,
  ``total_tok_s`` adds the prompt tokens of the completed requests sent in it. The summary
  says which (``throughput_window``). A closed loop of one to two waves has no steady
  window worth the name: its rate is counted per slot (``cycles``: Σ output tokens /
  (Σ request latencies / c), renewal-reward), so one long answer at the end of a short run
  does not read as a slow engine. Goodput is counted over the same window.
- ``error_rate`` = failed / all requests; failures are counted by ``error_kind``. Requests
  the load generator cut while in flight (the duration bound's grace period ran out, or an
  interrupt) are failures of kind ``cancelled``: they are the slowest requests of the run,
  and leaving them out would bias every percentile low. ``failure_messages`` keeps the
  most frequent error messages of each kind, so a report says *why* (``HTTP 401: ...``).
- ``short_outputs``: completed requests that returned fewer tokens than they asked for
  while the output length was pinned (``ignore_eos``/``min_tokens``): a server that ignores
  the pin measured another workload.
- ``usage_mismatches``: completed requests whose ``usage`` disagreed with their stream
  (counted, not credited: their streamed tokens are), with the tokens usage claimed and
  the tokens that streamed for them.

Gates (``gate_values``, ``gate_statistic``): the distributions above describe completed
requests, but an aggregate gate is computed over *every* request. A failed request counts
as the worst value for the objective, +∞ for an upper bound (``<``) and −∞ for a lower one
(``>``); for ``itl`` it counts once for every token gap it was asked for. So a P99 is never
taken over the survivors only: with more than 1 % of requests failed, P99 is ∞.
- goodput (DistServe, vLLM ``--goodput``): a request is *good* when it completed and meets
  every per-request threshold of all objectives together. ``goodput_tok_s`` /
  ``goodput_req_s`` are the output tokens / count of good requests over the window,
  ``attainment`` = good / all requests (failed requests are never good and count in all).

Percentiles use numpy's default ``'linear'`` method (the one vLLM ``benchmark_serving``
uses): for n sorted values x[0..n-1] and q in (0, 100), h = (n − 1)·q/100 and
P_q = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]). NaN values are dropped first.

Confidence bounds are distribution-free, from binomial order statistics (the argument
behind MLPerf LoadGen's early stopping): with n i.i.d. samples and p = q/100, the order
statistic X_(k) (1-based) exceeds the true p-quantile ξ_p with probability
P(X_(k) ≥ ξ_p) = P(Binomial(n, p) ≤ k − 1). The one-sided upper bound at confidence c is
X_(k) for the smallest k with P(Binomial(n, p) < k) ≥ c. It exists only when even the
maximum suffices, 1 − p^n ≥ c, i.e. n ≥ log(1 − c) / log(p): that n is
:func:`samples_needed` (299 for P99 at 95 %, 2995 for P99.9). For ``itl`` the samples are
token gaps, which are correlated within a request: the bound over pooled gaps is then
optimistic, and the per-request ITL thresholds of goodput are the sturdier gate.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from . import traffic
from .catalog import GAP_METRICS, METRICS, PERCENTILES, Stat, parse_stat, qkey, stat_name
from .records import ClientHealth, LoadLevel, Run
from .stats import (
    DEFAULT_CONFIDENCE,
    _check_confidence,
    _finite,
    _linear_positions,
    lower_confidence_bound,
    lower_rank,
    percentile,
    samples_needed,
    upper_confidence_bound,
    upper_rank,
)

__all__ = [
    "METRICS",
    "PERCENTILES",
    "Distribution",
    "Goodput",
    "RunSummary",
    "Stat",
    "Threshold",
    "Window",
    "aggregate_values",
    "clear_cache",
    "failure_counts",
    "failure_messages",
    "gate_statistic",
    "gate_values",
    "goodput",
    "lower_confidence_bound",
    "lower_rank",
    "meets_threshold",
    "per_request",
    "percentile",
    "request_values",
    "samples_needed",
    "short_outputs",
    "summarize",
    "throughput_window",
    "token_gaps",
    "upper_confidence_bound",
    "upper_rank",
    "usage_mismatches",
]


_NS_PER_MS = 1e6
# Columns of a 100k-request run take a few hundred MB; summarize and evaluate of the same
# run come back to back, so a couple of entries are enough.
_CACHE_SIZE = 2


class Threshold(Protocol):
    """What goodput needs of an objective (``slo.Objective`` has these fields)."""

    @property
    def metric(self) -> str: ...
    @property
    def stat(self) -> Stat: ...
    @property
    def op(self) -> str: ...
    @property
    def threshold(self) -> float: ...


# --------------------------------------------------------------------------- stats names


# --------------------------------------------------------------------------- statistics


# --------------------------------------------------------------------------- Distribution


def _num(x: float | None) -> float | None:
    """JSON has no NaN: undefined numbers travel as null."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return float(x)


def _unnum(x: Any) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of one metric's samples (ms). ``percentiles[q]`` is the point estimate,
    ``upper_bounds[q]`` its one-sided upper confidence bound at ``confidence`` (None with
    fewer than ``samples_needed[q]`` samples). ``std`` is the population std (ddof=0).
    Empty samples give NaN statistics."""

    name: str
    unit: str = "ms"
    count: int = 0
    mean: float = math.nan
    std: float = math.nan
    min: float = math.nan
    max: float = math.nan
    percentiles: Mapping[float, float] = field(default_factory=dict)
    upper_bounds: Mapping[float, float | None] = field(default_factory=dict)
    samples_needed: Mapping[float, int] = field(default_factory=dict)
    confidence: float = DEFAULT_CONFIDENCE

    def p(self, q: float) -> float:
        """The point estimate of P_q; KeyError when q was not summarised."""
        return self.percentiles[float(q)]

    def ub(self, q: float) -> float | None:
        """The upper confidence bound of P_q (None: too few samples)."""
        return self.upper_bounds[float(q)]

    @classmethod
    def of(
        cls,
        name: str,
        values: Iterable[float] | np.ndarray,
        *,
        percentiles: Sequence[float] = PERCENTILES,
        confidence: float = DEFAULT_CONFIDENCE,
        unit: str = "ms",
    ) -> Distribution:
        """Summarise the finite values. One ``np.partition`` serves every percentile and
        every bound, so this stays O(n) for millions of token gaps."""
        a = _finite(values)
        n = int(a.size)
        qs = tuple(float(q) for q in percentiles)
        needed = {q: samples_needed(q, confidence) for q in qs}
        if n == 0:
            return cls(
                name=name,
                unit=unit,
                count=0,
                percentiles={q: math.nan for q in qs},
                upper_bounds={q: None for q in qs},
                samples_needed=needed,
                confidence=confidence,
            )
        ranks = {q: upper_rank(n, q, confidence) for q in qs}
        kth: set[int] = set()
        for q in qs:
            lo, hi, _ = _linear_positions(n, q)
            kth.update((lo, hi))
            k = ranks[q]
            if k is not None:
                kth.add(k - 1)
        part = np.partition(a, sorted(kth))
        pct: dict[float, float] = {}
        for q in qs:
            lo, hi, frac = _linear_positions(n, q)
            x_lo, x_hi = float(part[lo]), float(part[hi])
            pct[q] = x_lo + frac * (x_hi - x_lo)
        ubs = {q: (None if ranks[q] is None else float(part[ranks[q] - 1])) for q in qs}
        return cls(
            name=name,
            unit=unit,
            count=n,
            mean=float(a.mean()),
            std=float(a.std()),
            min=float(a.min()),
            max=float(a.max()),
            percentiles=pct,
            upper_bounds=ubs,
            samples_needed=needed,
            confidence=confidence,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "count": self.count,
            "mean": _num(self.mean),
            "std": _num(self.std),
            "min": _num(self.min),
            "max": _num(self.max),
            "percentiles": {qkey(q): _num(v) for q, v in self.percentiles.items()},
            "upper_bounds": {qkey(q): _num(v) for q, v in self.upper_bounds.items()},
            "samples_needed": {qkey(q): n for q, n in self.samples_needed.items()},
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Distribution:
        return cls(
            name=d["name"],
            unit=d.get("unit", "ms"),
            count=int(d.get("count", 0)),
            mean=_unnum(d.get("mean")),
            std=_unnum(d.get("std")),
            min=_unnum(d.get("min")),
            max=_unnum(d.get("max")),
            percentiles={float(q): _unnum(v) for q, v in d.get("percentiles", {}).items()},
            upper_bounds={float(q): _num(v) for q, v in d.get("upper_bounds", {}).items()},
            samples_needed={float(q): int(v) for q, v in d.get("samples_needed", {}).items()},
            confidence=float(d.get("confidence", DEFAULT_CONFIDENCE)),
        )


# --------------------------------------------------------------------------- raw arrays


class _Arrays:
    """Columns extracted once from a run's records (the Python-object walk is the slow
    part; everything after it is numpy). Token gaps and their per-request grouping are
    built lazily because only ITL needs them."""

    __slots__ = (
        "_chunk_toks",
        "_chunk_ts",
        "_gap_groups",
        "_gaps",
        "_sample_counts",
        "_sorted_gaps",
        "chunk_counts",
        "n",
        "ok",
        "output_tokens",
        "per_request",
        "prompt_tokens",
        "requested_output",
        "run",
        "sent",
        "usage_mismatch",
    )

    def __init__(self, run: Run) -> None:
        recs = run.records
        n = len(recs)
        self.run = run
        self.n = n
        self.ok = np.fromiter((r.ok for r in recs), dtype=bool, count=n)
        self.sent = np.fromiter((r.sent_ns for r in recs), dtype=np.int64, count=n)
        end = np.fromiter((r.end_ns for r in recs), dtype=np.int64, count=n)
        self.chunk_counts = np.fromiter((len(r.chunk_ns) for r in recs), dtype=np.int64, count=n)
        has = self.chunk_counts > 0
        first = np.fromiter(
            (r.chunk_ns[0] if r.chunk_ns else 0 for r in recs), dtype=np.int64, count=n
        )
        content = np.fromiter(
            (-1 if r.first_content_ns is None else r.first_content_ns for r in recs),
            dtype=np.int64,
            count=n,
        )
        credits = [r.credit() for r in recs]
        self.output_tokens = np.fromiter((c[0] for c in credits), dtype=np.int64, count=n)
        self.usage_mismatch = np.fromiter((c[1] for c in credits), dtype=bool, count=n)
        self.requested_output = np.fromiter(
            (r.requested_output_tokens or 0 for r in recs), dtype=np.int64, count=n
        )
        self.prompt_tokens = np.fromiter(
            (
                r.prompt_tokens if r.prompt_tokens is not None else (r.requested_prompt_tokens or 0)
                for r in recs
            ),
            dtype=np.int64,
            count=n,
        )
        nan = np.full(n, np.nan)
        e2e = np.where(self.ok, (end - self.sent) / _NS_PER_MS, nan)
        ttft = np.where(self.ok & has, (first - self.sent) / _NS_PER_MS, nan)
        ttfot = np.where(self.ok & (content >= 0), (content - self.sent) / _NS_PER_MS, nan)
        denom = (self.output_tokens - 1).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(self.output_tokens >= 2, (e2e - ttft) / denom, nan)
        self.per_request: dict[str, np.ndarray] = {
            "ttft": ttft,
            "ttfot": ttfot,
            "tpot": tpot,
            "e2e": e2e,
        }
        self._gaps: np.ndarray | None = None
        self._chunk_ts: np.ndarray | None = None
        self._chunk_toks: np.ndarray | None = None
        self._gap_groups: np.ndarray | None = None
        self._sample_counts: np.ndarray | None = None
        self._sorted_gaps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """(arrival ns, tokens) of every output chunk of every record, in record order;
        tokens as :func:`token_gaps` counts them (usage spread over inexact chunks)."""
        if self._chunk_ts is None:
            self._build_gaps()
        return self._chunk_ts, self._chunk_toks  # type: ignore[return-value]

    def _build_gaps(self) -> None:
        recs = self.run.records
        counts = self.chunk_counts
        total = int(counts.sum())
        self._sample_counts = np.zeros(self.n, dtype=np.int64)
        if total == 0:
            self._gaps = np.empty(0)
            self._chunk_ts = np.empty(0, dtype=np.int64)
            self._chunk_toks = np.empty(0, dtype=np.int64)
            return
        # Records keep their chunk times in compact int64 arrays: gather them with C copies.
        flat = array("q")
        for r in recs:
            flat.extend(r.chunk_ns)
        ts = np.frombuffer(flat, dtype=np.int64)
        # Most records carry one token per chunk (or no counts at all): only the others'
        # counts are flattened; tuple.count runs in C, so the check is cheap.
        multi = np.fromiter(
            (
                len(r.chunk_tokens) == len(r.chunk_ns)
                and r.chunk_tokens.count(1) != len(r.chunk_tokens)
                for r in recs
            ),
            dtype=bool,
            count=self.n,
        )
        counted = counts.copy()
        toks: np.ndarray | None = None
        if multi.any():
            sel = np.flatnonzero(multi)
            counted_flat = array("I")
            for i in sel:
                counted_flat.extend(recs[i].chunk_tokens)
            vals = np.frombuffer(counted_flat, dtype=np.uint32).astype(np.int64)
            np.maximum(vals, 1, out=vals)  # a chunk in chunk_ns carried output: >= 1 token
            toks = np.ones(total, dtype=np.int64)
            toks[np.repeat(multi, counts)] = vals
            offsets = np.cumsum(counts[sel]) - counts[sel]
            counted[sel] = np.add.reduceat(vals, offsets)
        starts = np.cumsum(counts) - counts
        # Inexact counts and a credited total above them (usage that agrees with the stream,
        # within its tolerance): spread the extra tokens evenly over the request's chunks
        # (integer shares, floor((j+1)E/m) - floor(jE/m)), so the request's token count
        # matches what it is credited and each gap is split over its share.
        exact = np.fromiter((r.tokens_exact for r in recs), dtype=bool, count=self.n)
        has_usage = np.fromiter((r.completion_tokens is not None for r in recs), bool, count=self.n)
        extra = np.maximum(np.where(~exact & has_usage, self.output_tokens - counted, 0), 0)
        if extra.any():
            group = np.repeat(np.arange(self.n, dtype=np.int64), counts)
            pos = np.arange(total, dtype=np.int64) - starts[group]
            e = extra[group]
            m = counts[group]
            if toks is None:
                toks = np.ones(total, dtype=np.int64)
            toks = toks + ((pos + 1) * e) // m - (pos * e) // m
            del group, pos, e, m
        # diff[k] = ts[k+1] - ts[k] is a gap unless chunk k+1 starts a request; a request
        # with m chunks gives m - 1 gaps, in record order. Failed requests give none.
        keep = np.ones(total - 1, dtype=bool)
        boundary = starts[(counts > 0) & (starts > 0)] - 1
        keep[boundary] = False
        per_rec = np.maximum(counts - 1, 0)
        if not self.ok.all():
            keep &= np.repeat(self.ok, counts)[1:]
            per_rec = np.where(self.ok, per_rec, 0)
        gap_ns = np.diff(ts)[keep]
        self._chunk_ts = ts
        self._chunk_toks = np.ones(total, dtype=np.int64) if toks is None else toks
        if toks is None:
            self._gaps = gap_ns / _NS_PER_MS
            self._sample_counts = per_rec
            return
        w = toks[1:][keep]
        self._gaps = np.repeat(gap_ns / (w * _NS_PER_MS), w)
        has = per_rec > 0
        offsets = np.cumsum(per_rec[has]) - per_rec[has]
        self._sample_counts[has] = np.add.reduceat(w, offsets) if offsets.size else 0

    @property
    def gaps(self) -> np.ndarray:
        """Every ITL sample (ms) of completed requests, grouped by request in record order."""
        if self._gaps is None:
            self._build_gaps()
        return self._gaps  # type: ignore[return-value]

    def gap_counts(self) -> np.ndarray:
        """Number of ITL samples of each request."""
        if self._gaps is None:
            self._build_gaps()
        return self._sample_counts  # type: ignore[return-value]

    @property
    def gap_groups(self) -> np.ndarray:
        """The request index of every sample of :attr:`gaps` (built on demand: only the
        per-request ITL statistics need it)."""
        if self._gap_groups is None:
            self._gap_groups = np.repeat(np.arange(self.n, dtype=np.int64), self.gap_counts())
        return self._gap_groups

    def itl_mean(self) -> np.ndarray:
        counts = self.gap_counts()
        out = np.full(self.n, np.nan)
        has = counts > 0
        if has.any():
            offsets = np.cumsum(counts[has]) - counts[has]
            out[has] = np.add.reduceat(self.gaps, offsets) / counts[has]
        return out

    def _sorted_blocks(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each request's gaps sorted, as dense blocks: requests are bucketed by gap count
        (powers of two), each bucket padded with +inf to its longest request and sorted
        along rows. Much faster than a lexsort of all gaps, and the padding costs at most
        2x memory. Returns (request indices, gap counts, sorted rows) per bucket."""
        if self._sorted_gaps is not None:
            return self._sorted_gaps
        gaps, groups = self.gaps, self.gap_groups
        counts = self.gap_counts()
        starts = np.cumsum(counts) - counts
        pos = np.arange(gaps.size, dtype=np.int64) - starts[groups]
        bucket = np.zeros(self.n, dtype=np.int64)
        has = counts > 0
        bucket[has] = np.ceil(np.log2(counts[has])).astype(np.int64)
        blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        gap_bucket = bucket[groups]
        single = np.unique(bucket[has]).size == 1
        for b in np.unique(bucket[has]):
            rows = np.flatnonzero(has & (bucket == b))
            row_of = np.empty(self.n, dtype=np.int64)
            row_of[rows] = np.arange(rows.size)
            if single:
                sel_g, sel_v, sel_p = groups, gaps, pos
            else:
                m = gap_bucket == b
                sel_g, sel_v, sel_p = groups[m], gaps[m], pos[m]
            width = int(counts[rows].max())
            mat = np.full((rows.size, width), np.inf)
            mat[row_of[sel_g], sel_p] = sel_v
            mat.sort(axis=1)
            blocks.append((rows, counts[rows], mat))
        self._sorted_gaps = blocks
        return blocks

    def itl_percentile(self, q: float) -> np.ndarray:
        """Each request's own P_q over its own gaps (linear method), vectorised over the
        sorted blocks of :meth:`_sorted_blocks`."""
        out = np.full(self.n, np.nan)
        for rows, m, mat in self._sorted_blocks():
            h = (m - 1) * (q / 100.0)
            lo = np.floor(h).astype(np.int64)
            hi = np.minimum(lo + 1, m - 1)
            frac = h - lo
            r = np.arange(rows.size)
            x_lo = mat[r, lo]
            x_hi = mat[r, hi]
            out[rows] = x_lo + frac * (x_hi - x_lo)
        return out


_cache: dict[int, _Arrays] = {}


def _arrays(run: Run) -> _Arrays:
    """Cached by identity: summarize, evaluate and the reports all ask about one run, and
    the record walk is the expensive part. The entry holds the run, so an id is never
    reused while cached."""
    got = _cache.pop(id(run), None)
    if got is not None and got.run is run:
        _cache[id(run)] = got  # most recently used last
        return got
    arr = _Arrays(run)
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[id(run)] = arr
    return arr


def clear_cache() -> None:
    """Forget the cached columns of every run (benchmarks measure the cold path)."""
    _cache.clear()


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")


def per_request(run: Run) -> dict[str, np.ndarray]:
    """Per-request values (ms), aligned with ``run.records``: ``ttft``, ``ttfot``,
    ``tpot``, ``e2e`` and ``itl`` (the request's mean token gap). NaN for failed requests
    and where a value is undefined (no content chunk, fewer than two tokens)."""
    arr = _arrays(run)
    out = {k: v.copy() for k, v in arr.per_request.items()}
    out["itl"] = arr.itl_mean()
    return out


def token_gaps(run: Run) -> np.ndarray:
    """All ITL samples (ms) of completed requests, one per token after each request's
    first chunk.

    A gap g between chunk i−1 and chunk i that carries t_i tokens gives t_i samples of
    g / t_i (speculative decoding and frontends such as Dynamo pack several tokens into
    one chunk). t_i is ``chunk_tokens[i]`` (1 when absent). When ``tokens_exact`` is
    False and the request's credited output tokens N (``RequestRecord.credit``: usage
    only when it agrees with the stream) exceed the counted Σ t_i, the E = N − Σ t_i
    uncounted tokens are spread evenly over the request's m chunks in integer shares
    (chunk j gets ⌊(j+1)E/m⌋ − ⌊jE/m⌋ more), so the samples of a request add up to its
    last − first chunk time and their count matches its credit. A usage that disagrees
    with the stream is not credited, so it never spreads: the gaps are the chunks' own.
    Tokens that arrived in the first chunk have no preceding chunk and give no sample
    (their time is in TTFT). When usage reports fewer tokens than the chunks show, the
    chunks win."""
    return _arrays(run).gaps.copy()


def request_values(run: Run, metric: str, stat: Stat | str) -> np.ndarray:
    """The per-request value a goodput threshold ``metric`` ``stat`` is checked against,
    aligned with ``run.records``. For ``itl`` it is the request's own statistic over its
    own token gaps (its median gap for p50, its mean gap for mean); the other metrics
    have one value per request, so the statistic does not change it."""
    _check_metric(metric)
    stat = parse_stat(stat)
    arr = _arrays(run)
    if metric != "itl":
        return arr.per_request[metric].copy()
    if stat == "mean":
        return arr.itl_mean()
    return arr.itl_percentile(float(stat))


def aggregate_values(run: Run, metric: str) -> np.ndarray:
    """The samples an aggregate gate on ``metric`` is computed over (ms, finite only):
    one per completed request, or one per token gap for ``itl``."""
    _check_metric(metric)
    arr = _arrays(run)
    if metric == "itl":
        return arr.gaps.copy()
    return _finite(arr.per_request[metric])


def gate_values(run: Run, metric: str, upper: bool = True) -> tuple[np.ndarray, int]:
    """The samples an aggregate gate on ``metric`` is computed over, and how many of them
    stand for failed requests: :func:`aggregate_values` plus, for every failed request, +∞
    (``upper``: the gate bounds the metric from above) or −∞ (a lower bound), so that a
    failure is the worst value for either. For ``itl`` a failed request counts once for
    every token gap it was asked for (``requested_output_tokens`` − 1, at least 1)."""
    arr = _arrays(run)
    values = aggregate_values(run, metric)
    failed = ~arr.ok
    if not failed.any():
        return values, 0
    if metric == "itl":
        k = int(np.maximum(arr.requested_output[failed] - 1, 1).sum())
    else:
        k = int(failed.sum())
    sentinel = np.inf if upper else -np.inf
    return np.concatenate([values, np.full(k, sentinel)]), k


def gate_statistic(
    values: np.ndarray, q: float, confidence: float = DEFAULT_CONFIDENCE, upper: bool = True
) -> tuple[float, float | None]:
    """(P_q, its one-sided confidence bound) of gate samples that may hold ±∞
    (:func:`gate_values`). The estimate is the linear-method percentile, except that an
    interpolation touching an infinite sample takes the infinite one (a failure is never
    averaged with a success); the bound is the order statistic of :func:`upper_rank`
    (``upper``) or :func:`lower_rank`, None with too few samples."""
    a = np.asarray(values, dtype=np.float64)
    a = a[~np.isnan(a)]
    n = int(a.size)
    if n == 0:
        return math.nan, None
    lo, hi, frac = _linear_positions(n, q)
    k = upper_rank(n, q, confidence) if upper else lower_rank(n, q, confidence)
    kth = sorted({lo, hi} | ({k - 1} if k is not None else set()))
    part = np.partition(a, kth)
    x_lo, x_hi = float(part[lo]), float(part[hi])
    if x_lo == x_hi or frac == 0.0:
        estimate = x_lo
    elif math.isinf(x_lo):
        estimate = x_lo
    elif math.isinf(x_hi):
        estimate = x_hi
    else:
        estimate = x_lo + frac * (x_hi - x_lo)
    bound = None if k is None else float(part[k - 1])
    return estimate, bound


# --------------------------------------------------------------------------- goodput

_OPS = {
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def meets_threshold(
    run: Run, metric: str, stat: Stat | str, op: str, threshold: float
) -> np.ndarray:
    """Bool per record: completed and its :func:`request_values` ``op`` ``threshold``.

    An undefined value of a gap metric (``itl``, ``tpot``: fewer than two tokens) is met,
    there being no gap to miss it; an undefined event metric (``ttft``, ``ttfot``,
    ``e2e``: the event never came) is not."""
    if op not in _OPS:
        raise ValueError(f"unknown comparison {op!r}; use one of {', '.join(_OPS)}")
    arr = _arrays(run)
    v = request_values(run, metric, stat)
    defined = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        ok = _OPS[op](v, float(threshold))
    if metric in GAP_METRICS:
        ok = ok | ~defined
    else:
        ok = ok & defined
    return ok & arr.ok


@dataclass(frozen=True, slots=True)
class Goodput:
    """Good requests under a set of per-request thresholds. ``attainment`` is good / all
    requests (None for a run without requests)."""

    good: int
    requests: int
    good_output_tokens: int
    duration_s: float
    tok_s: float
    req_s: float
    attainment: float | None
    mask: np.ndarray = field(compare=False, repr=False, default_factory=lambda: np.zeros(0, bool))


def _window_s(run: Run, arr: _Arrays | None = None) -> float:
    """The measured window: ``run.start_ns .. run.end_ns``; when it is empty, the span of
    the records (first send to last byte)."""
    if run.end_ns > run.start_ns:
        return (run.end_ns - run.start_ns) / 1e9
    if run.records:
        a = arr or _arrays(run)
        end = max(r.end_ns for r in run.records)
        span = end - int(a.sent.min())
        return max(span, 0) / 1e9
    return 0.0


def _rate(x: float, seconds: float) -> float:
    return x / seconds if seconds > 0 else 0.0


WindowKind = Literal["steady", "cycles", "measured"]


@dataclass(frozen=True, slots=True)
class Window:
    """The span throughput is measured over. ``steady``: a closed loop's window in which
    every slot ran a measured request, from the c-th measured send to the last one;
    ``cycles``: a closed loop of one to two waves, where no such window is long enough: its
    length is the time one slot was busy, the sum of the measured requests' latencies over
    c (renewal-reward: a slot's rate is its tokens per request over its time per request);
    ``measured``: the whole measured window (open loops, and closed loops of less than
    one wave)."""

    start_ns: int
    end_ns: int
    kind: WindowKind

    @property
    def seconds(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9


def throughput_window(run: Run) -> Window:
    """The window of :class:`Window`. In a closed loop at concurrency c the first
    measured sends overlap the warm-up's last requests and the last ones are a partial
    wave with slots falling idle: over the whole measured window a run of 3.9 waves at c64
    read 9 % below what the engine delivered. Between the c-th and the last measured send
    every slot is busy, so the engine's rate at c is what streams in between."""
    arr = _arrays(run)
    secs = _window_s(run, arr)
    measured = Window(run.start_ns, run.start_ns + int(secs * 1e9), "measured")
    c = int(run.level.value) if run.level.mode == "concurrency" else 0
    if c < 1 or arr.n < c:
        return measured
    if arr.n >= 2 * c:
        sent = np.sort(arr.sent)
        start, end = int(sent[c - 1]), int(sent[-1])
        if end <= start or (end - start) < 0.25 * secs * 1e9:
            return measured
        return Window(start, end, "steady")
    # Too few waves for a steady window: the last requests of a short run are a partial
    # wave (a long answer alone at the end), and the whole window reads low (a 1.3-wave run
    # at c48 read 40 % of the engine's rate). Each slot's rate is its tokens per request
    # over its time per request, whatever the tail.
    ends = np.fromiter((r.end_ns for r in run.records), dtype=np.int64, count=arr.n)
    busy = int(np.clip(ends - arr.sent, 0, None).sum())
    if busy <= 0:
        return measured
    return Window(run.start_ns, run.start_ns + busy // c, "cycles")


def _in_window(run: Run, window: Window, mask: np.ndarray) -> tuple[int, int]:
    """(output tokens, completed requests) of the requests in ``mask`` within ``window``:
    all of them for the measured window; for the steady window the tokens of their chunks
    that arrived in it, and the requests that ended in it."""
    arr = _arrays(run)
    if window.kind != "steady":
        return int(arr.output_tokens[mask].sum()), int(mask.sum())
    ts, toks = arr.chunks()
    owner = np.repeat(mask, arr.chunk_counts)
    inside = owner & (ts >= window.start_ns) & (ts < window.end_ns)
    end = np.fromiter((r.end_ns for r in run.records), dtype=np.int64, count=arr.n)
    done = mask & (end >= window.start_ns) & (end < window.end_ns)
    return int(toks[inside].sum()), int(done.sum())


def goodput(run: Run, objectives: Iterable[Threshold]) -> Goodput:
    """Goodput of ``run``: a request is good when it completed and meets the per-request
    threshold of every objective (:func:`meets_threshold`); with no objectives every
    completed request is good."""
    arr = _arrays(run)
    mask = arr.ok.copy()
    for o in objectives:
        mask &= meets_threshold(run, o.metric, o.stat, o.op, o.threshold)
    good = int(mask.sum())
    tokens = int(arr.output_tokens[mask].sum())
    window = throughput_window(run)
    win_tokens, win_good = _in_window(run, window, mask)
    secs = window.seconds
    return Goodput(
        good=good,
        requests=arr.n,
        good_output_tokens=tokens,
        duration_s=secs,
        tok_s=_rate(win_tokens, secs),
        req_s=_rate(win_good, secs),
        attainment=(good / arr.n) if arr.n else None,
        mask=mask,
    )


# --------------------------------------------------------------------------- RunSummary


def failure_counts(run: Run) -> dict[str, int]:
    """Failed requests of ``run`` per failure kind, sorted by kind: the record's
    ``error_kind``, else ``http`` for a failure with a status, else ``unknown``."""
    counts: dict[str, int] = {}
    for r in run.records:
        if not r.ok:
            kind: str | None = r.error_kind
            if kind is None:
                kind = "http" if r.status else "unknown"
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


MAX_ERROR_MESSAGES = 5
_MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True, slots=True)
class ErrorMessage:
    """One error message of a run and how many failed requests gave it."""

    kind: str
    message: str
    count: int

    def __str__(self) -> str:
        return f"{self.kind} {self.count}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "count": self.count}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ErrorMessage:
        return cls(str(d["kind"]), str(d["message"]), int(d["count"]))


def failure_messages(run: Run, limit: int = MAX_ERROR_MESSAGES) -> tuple[ErrorMessage, ...]:
    """The ``limit`` most frequent (kind, message) pairs of the failed requests, most
    frequent first, each message cut to 300 characters. Bounded whatever the run's size:
    a run of a million distinct errors still reports five lines."""
    counts: dict[tuple[str, str], int] = {}
    for r in run.records:
        if r.ok:
            continue
        kind = r.error_kind or ("http" if r.status else "unknown")
        fallback = f"status {r.status}" if r.status else "no message"
        msg = (r.error or fallback).strip()
        if len(msg) > _MAX_MESSAGE_CHARS:
            msg = msg[: _MAX_MESSAGE_CHARS - 3] + "..."
        key = (kind, msg)
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return tuple(ErrorMessage(k, m, c) for (k, m), c in top)


def output_pinned(run: Run) -> bool:
    """Whether the run's requests pinned their output length (``ignore_eos`` and
    ``min_tokens``), as recorded in its meta by the load generator."""
    client = run.meta.get("client") if isinstance(run.meta, Mapping) else None
    return bool(isinstance(client, Mapping) and client.get("ignore_eos"))


def usage_mismatches(run: Run) -> tuple[int, int, int]:
    """(completed requests whose usage disagreed with their stream, the completion tokens
    their usage claimed, the tokens that streamed for them); see ``RequestRecord.credit``."""
    arr = _arrays(run)
    bad = np.flatnonzero(arr.ok & arr.usage_mismatch)
    if not bad.size:
        return 0, 0, 0
    recs = run.records
    claimed = sum(recs[i].completion_tokens or 0 for i in bad)
    streamed = sum(recs[i].streamed_tokens for i in bad)
    return int(bad.size), int(claimed), int(streamed)


def short_outputs(run: Run) -> int:
    """Completed requests whose output was shorter than requested while the output length
    was pinned (0 when it was not: then a short answer is the model's choice)."""
    if not output_pinned(run):
        return 0
    arr = _arrays(run)
    req = arr.requested_output
    return int((arr.ok & (req > 0) & (arr.output_tokens < req)).sum())


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The numbers of one run. ``distributions`` maps each of :data:`METRICS` to its
    :class:`Distribution` (completed requests; ``itl`` over token gaps). Goodput fields
    are None unless :func:`summarize` was given objectives (``objectives`` holds their
    labels). ``valid``/``invalid_reasons`` come from the client's self-check: an invalid
    run measured the load generator, not the engine; ``health`` holds its numbers (lags,
    CPU, processes). ``errors`` are the most frequent error messages of the failed
    requests; ``short_outputs`` the completed requests shorter than their pinned length
    (``output_pinned``); ``level_timeout`` the phase in which the level's time bound cut
    the run, if it did. ``usage_mismatches`` are the completed requests whose usage
    disagreed with their stream (``usage_claimed_tokens`` it claimed for them,
    ``usage_streamed_tokens`` streamed, and credited)."""

    level: LoadLevel
    requests: int
    completed: int
    failed: int
    failures: Mapping[str, int]
    error_rate: float
    duration_s: float
    distributions: Mapping[str, Distribution]
    output_tok_s: float
    total_tok_s: float
    req_s: float
    goodput_tok_s: float | None = None
    goodput_req_s: float | None = None
    attainment: float | None = None
    valid: bool = True
    invalid_reasons: tuple[str, ...] = ()
    good: int | None = None
    objectives: tuple[str, ...] = ()
    output_tokens: int = 0
    prompt_tokens: int = 0
    confidence: float = DEFAULT_CONFIDENCE
    errors: tuple[ErrorMessage, ...] = ()
    short_outputs: int = 0
    output_pinned: bool = False
    health: ClientHealth | None = None
    usage_mismatches: int = 0
    usage_claimed_tokens: int = 0
    usage_streamed_tokens: int = 0
    #: With failed requests: each metric's percentiles over *every* request, a failed one
    #: as +∞ (``gate_values``, what an upper-bound gate compares), so that a table does not
    #: show the survivors' P99 next to a gate that failed on ∞; None without failures
    #: (then they equal ``distributions``). In JSON a null here is +∞.
    with_failures: Mapping[str, Mapping[float, float]] | None = None
    level_timeout: str | None = None
    throughput_window: str = "measured"
    throughput_window_s: float = 0.0
    early_stop: str | None = None
    #: Offered against sent rate, a cap's waits, figures by turn and by conversation
    #: (``traffic.summarize``); None for a plain closed loop.
    traffic: Mapping[str, Any] | None = None
    #: The engine's own signals over the level (``signals.LevelSignals.to_dict``) with
    #: ``client_minus_engine_ttft_p50_ms`` / ``_p99_ms`` (network + client + API server)
    #: and ``energy_j_per_token``; None when signals were off.
    signals: Mapping[str, Any] | None = None

    _RUN_FIELDS = (
        "output_tok_s",
        "total_tok_s",
        "req_s",
        "goodput_tok_s",
        "goodput_req_s",
        "attainment",
        "error_rate",
        "duration_s",
    )

    def metric(self, name: str, stat: Stat | str | None = None) -> float:
        """A number by name: ``metric("ttft", 99)``, ``metric("ttft", "p99")``,
        ``metric("ttft_p99")``, ``metric("itl", "mean")``, or a run figure such as
        ``metric("output_tok_s")``. NaN when undefined; KeyError for an unknown name or a
        percentile that was not summarised."""
        if stat is None and name in self._RUN_FIELDS:
            v = getattr(self, name)
            return math.nan if v is None else float(v)
        if stat is None:
            base, sep, st = name.partition("_")
            if not sep:
                raise KeyError(f"{name!r}: give a statistic, e.g. metric({name!r}, 'p99')")
            name, stat = base, st
        if name not in self.distributions:
            raise KeyError(f"unknown metric {name!r}; valid: {', '.join(self.distributions)}")
        dist = self.distributions[name]
        try:
            s = parse_stat(stat)
        except ValueError as exc:
            raise KeyError(str(exc)) from None
        if s == "mean":
            return dist.mean
        return dist.p(s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level.to_dict(),
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "failures": dict(self.failures),
            "error_rate": self.error_rate,
            "duration_s": self.duration_s,
            "distributions": {k: d.to_dict() for k, d in self.distributions.items()},
            "output_tok_s": self.output_tok_s,
            "total_tok_s": self.total_tok_s,
            "req_s": self.req_s,
            "goodput_tok_s": self.goodput_tok_s,
            "goodput_req_s": self.goodput_req_s,
            "attainment": self.attainment,
            "valid": self.valid,
            "invalid_reasons": list(self.invalid_reasons),
            "good": self.good,
            "objectives": list(self.objectives),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "confidence": self.confidence,
            "errors": [e.to_dict() for e in self.errors],
            "short_outputs": self.short_outputs,
            "output_pinned": self.output_pinned,
            "usage_mismatches": self.usage_mismatches,
            "usage_claimed_tokens": self.usage_claimed_tokens,
            "usage_streamed_tokens": self.usage_streamed_tokens,
            "with_failures": None
            if self.with_failures is None
            else {
                m: {qkey(q): (None if math.isinf(v) else v) for q, v in qs.items()}
                for m, qs in self.with_failures.items()
            },
            "client_health": None if self.health is None else self.health.to_dict(),
            "level_timeout": self.level_timeout,
            "throughput_window": self.throughput_window,
            "throughput_window_s": self.throughput_window_s,
            "early_stop": self.early_stop,
            "traffic": None if self.traffic is None else dict(self.traffic),
            "signals": None if self.signals is None else dict(self.signals),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunSummary:
        def opt(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        return cls(
            level=LoadLevel.from_dict(d["level"]),
            requests=int(d["requests"]),
            completed=int(d["completed"]),
            failed=int(d["failed"]),
            failures={str(k): int(v) for k, v in d.get("failures", {}).items()},
            error_rate=float(d.get("error_rate", 0.0)),
            duration_s=float(d.get("duration_s", 0.0)),
            distributions={
                k: Distribution.from_dict(v) for k, v in d.get("distributions", {}).items()
            },
            output_tok_s=float(d.get("output_tok_s", 0.0)),
            total_tok_s=float(d.get("total_tok_s", 0.0)),
            req_s=float(d.get("req_s", 0.0)),
            goodput_tok_s=opt("goodput_tok_s"),
            goodput_req_s=opt("goodput_req_s"),
            attainment=opt("attainment"),
            valid=bool(d.get("valid", True)),
            invalid_reasons=tuple(d.get("invalid_reasons", ())),
            good=None if d.get("good") is None else int(d["good"]),
            objectives=tuple(d.get("objectives", ())),
            output_tokens=int(d.get("output_tokens", 0)),
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            confidence=float(d.get("confidence", DEFAULT_CONFIDENCE)),
            errors=tuple(ErrorMessage.from_dict(e) for e in d.get("errors") or ()),
            short_outputs=int(d.get("short_outputs", 0)),
            output_pinned=bool(d.get("output_pinned", False)),
            usage_mismatches=int(d.get("usage_mismatches", 0)),
            usage_claimed_tokens=int(d.get("usage_claimed_tokens", 0)),
            usage_streamed_tokens=int(d.get("usage_streamed_tokens", 0)),
            with_failures=None
            if not d.get("with_failures")
            else {
                m: {float(q): (math.inf if v is None else float(v)) for q, v in qs.items()}
                for m, qs in d["with_failures"].items()
            },
            health=None
            if not d.get("client_health")
            else ClientHealth.from_dict(d["client_health"]),
            level_timeout=d.get("level_timeout"),
            throughput_window=str(d.get("throughput_window", "measured")),
            throughput_window_s=float(d.get("throughput_window_s", 0.0)),
            early_stop=d.get("early_stop"),
            traffic=d.get("traffic"),
            signals=d.get("signals"),
        )


def _label(o: Threshold) -> str:
    label = getattr(o, "label", None)
    if isinstance(label, str):
        return label
    return f"{o.metric}_{stat_name(o.stat)} {o.op} {o.threshold:g} ms"


def summarize(
    run: Run, objectives: Iterable[Threshold] = (), confidence: float = DEFAULT_CONFIDENCE
) -> RunSummary:
    """Summarise a run: distributions of every metric with percentiles and bounds,
    throughput, failures, and, when ``objectives`` are given, goodput and attainment."""
    _check_confidence(confidence)
    objs = tuple(objectives)
    arr = _arrays(run)
    ok = arr.ok
    completed = int(ok.sum())
    dists = {
        m: Distribution.of(m, aggregate_values(run, m), confidence=confidence) for m in METRICS
    }
    secs = _window_s(run, arr)
    out_tokens = int(arr.output_tokens[ok].sum())
    prompt_tokens = int(arr.prompt_tokens[ok].sum())
    window = throughput_window(run)
    win_out, win_done = _in_window(run, window, ok)
    win_prompt = prompt_tokens
    if window.kind == "steady":
        sent_in = ok & (arr.sent >= window.start_ns) & (arr.sent < window.end_ns)
        win_prompt = int(arr.prompt_tokens[sent_in].sum())
    win_s = window.seconds
    gp = goodput(run, objs) if objs else None
    mismatched, claimed, streamed = usage_mismatches(run)
    with_failures = None
    if completed < arr.n:
        with_failures = {
            m: {q: gate_statistic(gate_values(run, m)[0], q)[0] for q in PERCENTILES}
            for m in METRICS
        }
    return RunSummary(
        level=run.level,
        requests=arr.n,
        completed=completed,
        failed=arr.n - completed,
        failures=failure_counts(run),
        error_rate=((arr.n - completed) / arr.n) if arr.n else 0.0,
        duration_s=secs,
        distributions=dists,
        output_tok_s=_rate(win_out, win_s),
        total_tok_s=_rate(win_out + win_prompt, win_s),
        req_s=_rate(win_done, win_s),
        goodput_tok_s=None if gp is None else gp.tok_s,
        goodput_req_s=None if gp is None else gp.req_s,
        attainment=None if gp is None else gp.attainment,
        valid=run.health.valid,
        invalid_reasons=tuple(run.health.reasons),
        good=None if gp is None else gp.good,
        objectives=tuple(_label(o) for o in objs),
        output_tokens=out_tokens,
        prompt_tokens=prompt_tokens,
        confidence=confidence,
        errors=failure_messages(run),
        short_outputs=short_outputs(run),
        output_pinned=output_pinned(run),
        usage_mismatches=mismatched,
        usage_claimed_tokens=claimed,
        usage_streamed_tokens=streamed,
        with_failures=with_failures,
        health=run.health,
        level_timeout=_timeout_phase(run),
        throughput_window=window.kind,
        throughput_window_s=win_s,
        early_stop=_early_reason(run),
        traffic=traffic.summarize(run),
        signals=_signals(run, dists, out_tokens),
    )


def _signals(run: Run, dists: Mapping[str, Distribution], out_tokens: int) -> dict[str, Any] | None:
    """The run's engine signals with what needs the client's figures: the client-minus-
    engine TTFT (the network, the client and the API server in between) and the energy per
    output token."""
    raw = run.meta.get("signals") if isinstance(run.meta, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    out = dict(raw)
    ttft = dists.get("ttft")
    for q, key in ((50, "p50"), (99, "p99")):
        eng = raw.get(f"ttft_{key}_ms")
        cli = ttft.p(q) if ttft is not None and ttft.count else None
        if eng is not None and cli is not None and math.isfinite(cli):
            out[f"client_minus_engine_ttft_{key}_ms"] = cli - float(eng)
    gpu = raw.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("energy_j") is not None and out_tokens > 0:
        out["energy_j_per_token"] = float(gpu["energy_j"]) / out_tokens
    return out


def _early_reason(run: Run) -> str | None:
    info = run.meta.get("early_stop") if isinstance(run.meta, Mapping) else None
    return str(info.get("reason")) if isinstance(info, Mapping) else None


def _timeout_phase(run: Run) -> str | None:
    info = run.meta.get("level_timeout") if isinstance(run.meta, Mapping) else None
    if isinstance(info, Mapping):
        return str(info.get("phase") or "measuring")
    return None
