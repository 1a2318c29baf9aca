"""The smallest change a comparison row could have detected (its minimum detectable
effect, MDE) at the runs' sample sizes, and the per-window rates that give throughput a
noise bound of its own.

Per metric, with z the two-sided normal quantile of the confidence and z_power that of
``POWER`` (80 %):

- **latency percentiles**: the rise at which the two distribution-free intervals (each at
  the square root of the confidence, as ``stats.quantile_shift``) stop overlapping:
  ``(old.high - old) + (new - new.low)``; None while a bound is open (too few requests
  for that tail);
- **latency means**: ``(z + z_power) * sqrt(var_old / n_old + var_new / n_new)``;
- **attainment**: ``(z + z_power) * sqrt(p (1 - p) (1 / n_old + 1 / n_new))`` with the
  pooled proportion ``p``;
- **throughput** (output tok/s) and **req/s**: ``(z + z_power) * sqrt(se_old^2 +
  se_new^2)``, each ``se`` the standard error of the run's rate from ``WINDOWS``
  equal windows of its measured time (batch means: the tokens each window produced, a
  request's spread evenly from its first token to its end; the requests that ended in
  it). This is the run's own, within-run spread: a change of the engine
  between runs (another node, a warmer cache) is not in it; the run history's spread
  (``--slo-compare=history``) is;
- **goodput** (good tok/s) and **goodput_req** (good req/s): the same, over the good
  requests only (the samples' ``good`` column, the flags under the verdict's objectives:
  ``document.samples.with_good``); None for a document without them;
- anything else: None.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from pytest_llmslo import stats
from pytest_llmslo.catalog import MetricSpec
from pytest_llmslo.sweep import SweepPoint

__all__ = ["POWER", "WINDOWS", "min_detectable", "window_rates", "window_se", "z_of"]

#: The power at which a change counts as detectable.
POWER = 0.8
#: The windows a run's measured time is cut into for its per-window rates, besides the
#: first and the last (left out: the ramp and the drain).
WINDOWS = 10
#: Fewer windows than this (a run of few requests) give no rate bound.
MIN_WINDOWS = 4
#: Requests per window, at least, on average.
_PER_WINDOW = 5

#: The rate metrics that per-window samples bound, by their summary field.
WINDOW_FIELDS = ("output_tok_s", "req_s", "goodput_tok_s", "goodput_req_s")
#: The fields counted in requests (the others in output tokens).
_REQUEST_FIELDS = ("req_s", "goodput_req_s")
#: The fields over the good requests only (the samples' ``good`` column).
_GOOD_FIELDS = ("goodput_tok_s", "goodput_req_s")


def z_of(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (1.96 at 95 %)."""
    return NormalDist().inv_cdf((1.0 + confidence) / 2.0)


def _column(point: SweepPoint, name: str) -> list[float | None] | None:
    """A sample column of ``point``, its non-numbers as None (a document read back)."""
    values = (point.samples or {}).get(name)
    if not isinstance(values, list | tuple):
        return None
    return [v if isinstance(v, int | float) else None for v in values]


def _finite(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _rows(point: SweepPoint, field: str) -> tuple[list[tuple[float, float, float]], int] | None:
    """Per request counted in ``field``: (first token, end, its weight: 1 or its output
    tokens); and how many completed requests there are (they set the windows)."""
    ends, oks = _column(point, "end_s"), _column(point, "ok")
    tokens, firsts = _column(point, "output_tokens"), _column(point, "first_token_s")
    if ends is None or oks is None or tokens is None or field not in WINDOW_FIELDS:
        return None
    firsts = firsts if firsts is not None and len(firsts) == len(ends) else list(ends)
    goods = _column(point, "good") if field in _GOOD_FIELDS else oks
    if goods is None or not len(ends) == len(oks) == len(tokens) == len(goods):
        return None
    rows, completed = [], 0
    for end, ok, good, tok, first in zip(ends, oks, goods, tokens, firsts, strict=True):
        e = _finite(end)
        if e is None or ok != 1:
            continue
        completed += 1
        f = _finite(first)
        f = e if f is None or f > e else f
        weight = 1.0 if field in _REQUEST_FIELDS else _finite(tok) or 0.0
        rows.append((f, e, weight if good == 1 else 0.0))
    return rows, completed


def window_rates(point: SweepPoint, field: str) -> np.ndarray | None:
    """The rate of ``field`` (``WINDOW_FIELDS``: output tok/s, req/s, goodput in tok/s or
    req/s) in each of up to ``WINDOWS`` equal windows of the point's measured time, from
    its stored per-request samples; None without them or with too few requests. A
    request's output tokens are spread evenly from its first token to its end (a closed
    loop's requests end together, so counting tokens where they end would make the windows
    lurch); a completed request counts in the window it ended in. Goodput counts the good
    requests only (the ``good`` column), over the same windows as throughput."""
    found = _rows(point, field)
    if found is None:
        return None
    rows, completed = found
    # Two more windows than are used: the first (the load ramping up) and the last (the
    # requests in flight draining) are left out.
    k = min(WINDOWS, completed // _PER_WINDOW) + 2
    span = max((e for _, e, _ in rows), default=0.0)
    if k - 2 < MIN_WINDOWS or span <= 0:
        return None
    a = np.asarray(rows, dtype=float)
    width = span / k
    if field in _REQUEST_FIELDS:
        idx = np.minimum((a[:, 1] / width).astype(int), k - 1)
        return np.bincount(idx, weights=a[:, 2], minlength=k)[1:-1] / width
    lo, hi = np.arange(k) * width, np.arange(1, k + 1) * width
    length = a[:, 1] - a[:, 0]
    overlap = np.clip(
        np.minimum(a[:, 1:2], hi[None, :]) - np.maximum(a[:, 0:1], lo[None, :]), 0.0, None
    )
    share = np.where(
        length[:, None] > 0,
        overlap / np.where(length > 0, length, 1.0)[:, None],
        # No time between the first token and the end: all of it in the end's window.
        (np.minimum((a[:, 1] / width).astype(int), k - 1)[:, None] == np.arange(k)[None, :]),
    )
    rates: np.ndarray = (share * a[:, 2:3]).sum(axis=0)[1:-1] / width
    return rates


def window_se(rates: np.ndarray) -> float:
    """The standard error of a run's rate from its per-window rates (batch means)."""
    return float(np.std(rates, ddof=1) / math.sqrt(len(rates)))


def _latency(spec: MetricSpec, old: SweepPoint, new: SweepPoint, confidence: float) -> float | None:
    xs, ys = _column(old, f"{spec.field}_ms"), _column(new, f"{spec.field}_ms")
    if xs is None or ys is None:
        return None
    a, b = stats.finite_samples(xs), stats.finite_samples(ys)
    if a.size < 2 or b.size < 2:
        return None
    if spec.stat == "mean":
        se = math.sqrt(float(np.var(a, ddof=1)) / a.size + float(np.var(b, ddof=1)) / b.size)
        return (z_of(confidence) + NormalDist().inv_cdf(POWER)) * se
    if not isinstance(spec.stat, int | float):
        return None
    shift = stats.quantile_shift(a, b, float(spec.stat), confidence)
    if shift.old.high is None or shift.new.low is None:
        return None
    return (shift.old.high - shift.old.estimate) + (shift.new.estimate - shift.new.low)


def _counts(point: SweepPoint) -> tuple[int, int] | None:
    for src in (point.verdict, point.summary):
        good, requests = getattr(src, "good", None), getattr(src, "requests", None)
        if isinstance(good, int) and isinstance(requests, int) and requests > 0:
            return good, requests
    return None


def min_detectable(
    spec: MetricSpec, old: SweepPoint, new: SweepPoint, confidence: float
) -> float | None:
    """The smallest change of ``spec``'s metric these two points could have shown, in the
    metric's unit (a fraction for attainment); None where it cannot be told."""
    factor = z_of(confidence) + NormalDist().inv_cdf(POWER)
    if spec.kind == "latency":
        return _latency(spec, old, new, confidence)
    if spec.field == "attainment":
        ca, cb = _counts(old), _counts(new)
        if ca is None or cb is None:
            return None
        n = ca[1] + cb[1]
        p = (ca[0] + cb[0]) / n
        var = max(p * (1.0 - p), 1.0 / n)  # an all-good pair still bounds at ~1/n
        return factor * math.sqrt(var * (1.0 / ca[1] + 1.0 / cb[1]))
    if spec.field in WINDOW_FIELDS:
        ra, rb = window_rates(old, spec.field), window_rates(new, spec.field)
        if ra is None or rb is None:
            return None
        return factor * math.hypot(window_se(ra), window_se(rb))
    return None
