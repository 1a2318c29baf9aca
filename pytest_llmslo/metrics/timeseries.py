"""A level's per-second series, from the per-request samples a results document holds
(``document.compact_samples``: ``sent_s``, ``first_token_s``, ``end_s`` in seconds from
the measured window's start, aligned with ``ttft_ms``, ``itl_ms``, ``ok`` and
``output_tokens``).

The window runs from 0 to the last request's end, cut into whole seconds; the last,
partial second is a bin of its own and its rates are over the part of it inside the
window. Per second:

- ``in_flight``: requests in flight, averaged over the second (the time each request
  spent between its send and its end inside the second, summed, over the second's length);
- ``completed`` and ``errors``: requests that ended in the second, completed or failed;
- ``output_tok_s``: the output tokens of completed requests, each request's spread evenly
  over its stream (first token to end; all at its end when the two coincide), per second;
- ``ttft_p50_ms``/``ttft_p99_ms``: TTFT percentiles of the requests whose *first token
  arrived* in the second (what a user saw then, not what was asked then), None without one;
- ``itl_p50_ms``/``itl_p99_ms``: percentiles of the requests' own ITL (their mean token
  gap) over the requests that ended in the second, None without one.

Percentiles are ``stats.percentile``'s (linear interpolation), as everywhere else.

``request_times`` gives the same samples straight from a measured run (its columns,
``metrics.columns``: one read, whether the records are objects or a store of columns), for
the series of a level being judged (faults, scale-up).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pytest_llmslo.stats import percentile

if TYPE_CHECKING:
    from pytest_llmslo.records import Run

__all__ = ["SecondSeries", "per_second", "request_times"]


@dataclass(frozen=True, slots=True)
class SecondSeries:
    """One value per second of the window; ``seconds`` holds each second's start."""

    seconds: tuple[float, ...]
    in_flight: tuple[float, ...]
    completed: tuple[int, ...]
    errors: tuple[int, ...]
    output_tok_s: tuple[float, ...]
    ttft_p50_ms: tuple[float | None, ...]
    ttft_p99_ms: tuple[float | None, ...]
    itl_p50_ms: tuple[float | None, ...]
    itl_p99_ms: tuple[float | None, ...] = ()


def request_times(run: Run) -> dict[str, np.ndarray]:
    """``run``'s per-request ``sent_s``, ``first_token_s`` (NaN without a token) and
    ``end_s`` in seconds from ``run.start_ns``, its ``ok`` (1/0) and ``output_tokens``, as
    ``per_second`` reads them, aligned with ``run.records``."""
    from .columns import columns

    cols = columns(run)
    t0 = run.start_ns
    first = np.where(cols.chunk_counts > 0, (cols.first_chunk_ns - t0) / 1e9, np.nan)
    return {
        "sent_s": (cols.sent_ns - t0) / 1e9,
        "first_token_s": first,
        "end_s": (cols.end_ns - t0) / 1e9,
        "ok": cols.ok.astype(np.float64),
        "output_tokens": cols.output_tokens.astype(np.float64),
    }


#: One level's per-request samples by name: a document's lists (None: no value) or a
#: run's columns (NaN: no value).
Samples = Mapping[str, Sequence[float | None] | np.ndarray]


def _floats(samples: Samples, key: str, n: int) -> np.ndarray:
    values = samples.get(key)
    if values is None:
        return np.full(n, np.nan)
    if isinstance(values, np.ndarray):  # request_times: NaN already stands for None
        return values.astype(np.float64)
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _area(edges: np.ndarray, start: np.ndarray, end: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per bin between ``edges``: the integral of sum_i w_i·[start_i <= t < end_i] dt.
    From F(t) = G(t, start) - G(t, end), G(t, x) = sum over x_i < t of w_i·(t - x_i)."""

    def g(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        xs, ws = x[order], w[order]
        cw = np.concatenate(([0.0], np.cumsum(ws)))
        cwx = np.concatenate(([0.0], np.cumsum(ws * xs)))
        k = np.searchsorted(xs, edges, side="left")
        return edges * cw[k] - cwx[k]

    area: np.ndarray = np.diff(g(start) - g(end))
    return area


def _bin_of(t: np.ndarray, n: int) -> np.ndarray:
    bins: np.ndarray = np.clip(np.floor(t), 0, n - 1).astype(np.int64)
    return bins


def _pct_per_bin(
    values: np.ndarray, bins: np.ndarray, n: int, q: float
) -> tuple[float | None, ...]:
    out: list[float | None] = [None] * n
    keep = np.isfinite(values)
    for b in np.unique(bins[keep]):
        out[int(b)] = percentile(values[keep & (bins == b)], q)
    return tuple(out)


def per_second(samples: Samples | None) -> SecondSeries | None:
    """The per-second series of one level's ``samples``; None when they hold no times (a
    document written before the samples had them) or no request."""
    if not samples or samples.get("sent_s") is None or samples.get("end_s") is None:
        return None
    n_req = len(samples["sent_s"])
    sent, end = _floats(samples, "sent_s", n_req), _floats(samples, "end_s", n_req)
    timed = np.isfinite(sent) & np.isfinite(end)
    if not timed.any():
        return None
    sent, end = np.maximum(sent, 0.0), np.maximum(end, sent)
    first = _floats(samples, "first_token_s", n_req)
    ok = _floats(samples, "ok", n_req) == 1.0
    tokens = np.nan_to_num(_floats(samples, "output_tokens", n_req))
    horizon = float(end[timed].max())
    n = max(1, math.ceil(horizon))
    edges = np.minimum(np.arange(n + 1, dtype=np.float64), max(horizon, 1e-9))
    edges[-1] = max(horizon, 1e-9)
    width = np.diff(edges)
    in_flight = _area(edges, sent[timed], end[timed], np.ones(int(timed.sum()))) / width
    ended = _bin_of(end, n)
    completed = np.bincount(ended[timed & ok], minlength=n)
    errors = np.bincount(ended[timed & ~ok], minlength=n)
    # Output tokens of completed requests, spread evenly over first token .. end.
    streams = timed & ok & np.isfinite(first) & (tokens > 0)
    f = np.minimum(np.maximum(first[streams], sent[streams]), end[streams])
    e, tk = end[streams], tokens[streams]
    spread = e - f > 0
    out_tokens = _area(edges, f[spread], e[spread], tk[spread] / (e[spread] - f[spread]))
    out_tokens += np.bincount(ended[streams][~spread], weights=tk[~spread], minlength=n)
    ttft, itl = _floats(samples, "ttft_ms", n_req), _floats(samples, "itl_ms", n_req)
    has_first = np.isfinite(first)
    first_bin = _bin_of(np.where(has_first, first, 0.0), n)
    return SecondSeries(
        seconds=tuple(float(s) for s in range(n)),
        in_flight=tuple(float(v) for v in in_flight),
        completed=tuple(int(v) for v in completed),
        errors=tuple(int(v) for v in errors),
        output_tok_s=tuple(float(v) for v in out_tokens / width),
        ttft_p50_ms=_pct_per_bin(np.where(has_first, ttft, np.nan), first_bin, n, 50.0),
        ttft_p99_ms=_pct_per_bin(np.where(has_first, ttft, np.nan), first_bin, n, 99.0),
        itl_p50_ms=_pct_per_bin(np.where(timed, itl, np.nan), ended, n, 50.0),
        itl_p99_ms=_pct_per_bin(np.where(timed, itl, np.nan), ended, n, 99.0),
    )
