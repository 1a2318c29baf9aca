"""Gates: the samples an aggregate objective is judged over, its statistic and bound, and
whether each request meets a per-request threshold.

The distributions describe completed requests, but an aggregate gate is computed over
*every* request. A failed request counts as the worst value for the objective, +∞ for an
upper bound (``<``) and −∞ for a lower one (``>``); for a metric per token (``itl``) it
counts once for every token gap it was asked for. So a P99 is never taken over the
survivors only: with more than 1 % of requests failed, P99 is ∞.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from pytest_llmslo.catalog import Stat
from pytest_llmslo.records import Run
from pytest_llmslo.stats import DEFAULT_CONFIDENCE, _linear_positions, lower_rank, upper_rank

from .columns import columns, entry
from .values import aggregate_values, request_values

__all__ = ["Threshold", "gate_statistic", "gate_values", "meets_threshold"]


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


def gate_values(run: Run, metric: str, upper: bool = True) -> tuple[np.ndarray, int]:
    """The samples an aggregate gate on ``metric`` is computed over, and how many of them
    stand for failed requests: :func:`aggregate_values` plus, for every failed request, +∞
    (``upper``: the gate bounds the metric from above) or −∞ (a lower bound), so that a
    failure is the worst value for either. For ``itl`` a failed request counts once for
    every token gap it was asked for (``requested_output_tokens`` − 1, at least 1)."""
    m = entry(metric)
    arr = columns(run)
    values = aggregate_values(run, metric)
    failed = ~arr.ok
    if not failed.any():
        return values, 0
    if m.per == "token":
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
    m = entry(metric)
    arr = columns(run)
    v = request_values(run, metric, stat)
    defined = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        ok = _OPS[op](v, float(threshold))
    if m.gap:
        ok = ok | ~defined
    else:
        ok = ok & defined
    good: np.ndarray = ok & arr.ok
    return good
