"""Is a difference between two runs more than run-to-run noise? Tests on per-request samples.

Four tests, all in numpy (no scipy dependency):

- ``mann_whitney_u``: the Mann-Whitney U (Wilcoxon rank-sum) test with the normal
  approximation, the tie correction of the variance and a continuity correction. It
  asks whether one sample tends to be larger than the other (a shift of the whole
  distribution). Same numbers as ``scipy.stats.mannwhitneyu(x, y, method="asymptotic")``.
- ``bootstrap_diff``: a seeded percentile-bootstrap confidence interval of
  ``stat(y) - stat(x)`` where ``stat`` is a percentile (P99, ...) or the mean. It asks
  about the very number a report shows: when the interval contains 0, the change of that
  statistic is within what resampling the same requests produces.
- ``quantile_shift``: distribution-free confidence intervals of a percentile on each
  side from binomial order statistics (the method of ``metrics.upper_confidence_bound``),
  each at ``sqrt(confidence)`` so that both cover their true percentile with probability
  ``confidence``; the percentile has changed when the two intervals are disjoint. Unlike
  the bootstrap it stays valid in the tail with few samples: a P99 of 100 requests has no
  upper bound at all, so no rise of it can be shown (the bootstrap of such a tail
  percentile is degenerate and reports changes between two samples of one distribution).
- ``two_proportion_test``: the pooled two-proportion z-test, for attainment (good / all).

Every function takes the two samples as "old" (``x``) then "new" (``y``) and drops
non-finite values (failed requests are NaN / None in the stored samples). Results are
frozen dataclasses with ``to_dict()``, so they can travel into JSON and JUnit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "BootstrapInterval",
    "ProportionTest",
    "QuantileInterval",
    "QuantileShift",
    "RankTest",
    "bootstrap_diff",
    "finite_samples",
    "lower_confidence_bound",
    "lower_rank",
    "mann_whitney_u",
    "normal_sf",
    "percentile",
    "quantile_interval",
    "quantile_shift",
    "rankdata",
    "samples_needed",
    "two_proportion_test",
    "upper_confidence_bound",
    "upper_rank",
]

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000

# Resampled matrices are built in chunks of at most this many values, so a bootstrap over
# tens of thousands of requests stays within a few tens of MB.
_CHUNK_VALUES = 2_000_000

Alternative = Literal["two-sided", "less", "greater"]


def finite_samples(values: Iterable[float | None] | np.ndarray) -> np.ndarray:
    """``values`` as a float64 array without None, NaN and infinities."""
    if isinstance(values, np.ndarray):
        a = values.astype(np.float64, copy=False).ravel()
    else:
        a = np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
    return a[np.isfinite(a)]


def normal_sf(z: float) -> float:
    """Survival function of the standard normal, P(Z > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def rankdata(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based; ties get the mean of their ranks) and the sizes of the tie
    groups, in one sort."""
    a = np.asarray(values, dtype=np.float64).ravel()
    n = a.size
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    # Start of every run of equal values in the sorted array.
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    counts = np.diff(np.r_[starts, n])
    # A run covering sorted positions [k, k+t) gets the average rank k + (t + 1) / 2.
    avg = starts + (counts + 1) / 2.0
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(avg, counts)
    return ranks, counts


@dataclass(frozen=True, slots=True)
class RankTest:
    """Result of ``mann_whitney_u``. ``u`` is the U statistic of ``x`` (the number of
    pairs with x > y, ties counting one half); ``effect`` is ``u / (n_x * n_y)``, the
    probability that an old value exceeds a new one (0.5: no tendency); ``z`` the
    standardised statistic used for ``p_value``."""

    u: float
    z: float
    p_value: float
    n_x: int
    n_y: int
    effect: float
    alternative: Alternative = "two-sided"

    def significant(self, alpha: float = 1.0 - DEFAULT_CONFIDENCE) -> bool:
        return self.p_value < alpha

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": "mann-whitney-u",
            "u": self.u,
            "z": self.z,
            "p_value": self.p_value,
            "n_x": self.n_x,
            "n_y": self.n_y,
            "effect": self.effect,
            "alternative": self.alternative,
        }


def mann_whitney_u(
    x: Iterable[float | None] | np.ndarray,
    y: Iterable[float | None] | np.ndarray,
    *,
    alternative: Alternative = "two-sided",
    continuity: bool = True,
) -> RankTest:
    """Mann-Whitney U test of ``x`` against ``y`` with the normal approximation.

    ``U_x = R_x - n_x (n_x + 1) / 2`` from the average ranks of the pooled sample; the null
    mean is ``n_x n_y / 2`` and the tie-corrected variance
    ``n_x n_y / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1)))`` over the tie groups ``t``.
    ``alternative="greater"``: x tends to be larger than y; ``"less"``: smaller. With
    ``continuity`` the statistic moves 0.5 towards the mean (as scipy does by default).
    Raises ValueError when either sample has no finite value. When every value is equal
    the variance is zero and the result is ``p_value=1``.
    """
    a, b = finite_samples(x), finite_samples(y)
    n1, n2 = int(a.size), int(b.size)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"mann_whitney_u needs values on both sides, got {n1} and {n2}")
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater': {alternative!r}")
    ranks, ties = rankdata(np.concatenate([a, b]))
    n = n1 + n2
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u2 = n1 * n2 - u1
    mu = n1 * n2 / 2.0
    tie_term = float(np.sum(ties.astype(np.float64) ** 3 - ties)) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    effect = u1 / (n1 * n2)
    if var <= 0:
        return RankTest(u1, 0.0, 1.0, n1, n2, effect, alternative)
    sd = math.sqrt(var)
    cc = 0.5 if continuity else 0.0
    if alternative == "two-sided":
        u = max(u1, u2)
        z = (u - mu - cc) / sd
        p = min(1.0, 2.0 * normal_sf(z))
        # Report z with the sign of x's tendency: positive when x tends to be larger.
        z = z if u1 >= u2 else -z
    elif alternative == "greater":
        z = (u1 - mu - cc) / sd
        p = normal_sf(z)
    else:
        z = (u2 - mu - cc) / sd
        p = normal_sf(z)
        z = -z
    return RankTest(u1, z, min(max(p, 0.0), 1.0), n1, n2, effect, alternative)


@dataclass(frozen=True, slots=True)
class BootstrapInterval:
    """A percentile-bootstrap interval of ``stat(new) - stat(old)``. ``estimate`` is the
    difference on the samples themselves; ``[low, high]`` the two-sided interval at
    ``confidence``. ``contains_zero``: the change is within resampling noise."""

    stat: float | str
    estimate: float
    low: float
    high: float
    confidence: float
    resamples: int
    seed: int
    n_x: int
    n_y: int

    @property
    def contains_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": "bootstrap",
            "stat": self.stat,
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "n_x": self.n_x,
            "n_y": self.n_y,
        }


def _stat_rows(matrix: np.ndarray, stat: float | str) -> np.ndarray:
    rows: np.ndarray
    if stat == "mean":
        rows = matrix.mean(axis=1)
    else:
        # The same "linear" percentile definition as metrics.percentile, so the interval is
        # about the number the summary reports.
        rows = np.percentile(matrix, float(stat), axis=1, method="linear")
    return rows


def _stat(values: np.ndarray, stat: float | str) -> float:
    if stat == "mean":
        return float(values.mean())
    return float(np.percentile(values, float(stat), method="linear"))


def _resampled(values: np.ndarray, stat: float | str, resamples: int, rng: Any) -> np.ndarray:
    n = values.size
    out = np.empty(resamples, dtype=np.float64)
    per_chunk = max(1, _CHUNK_VALUES // max(n, 1))
    done = 0
    while done < resamples:
        k = min(per_chunk, resamples - done)
        idx = rng.integers(0, n, size=(k, n))
        out[done : done + k] = _stat_rows(values[idx], stat)
        done += k
    return out


def bootstrap_diff(
    x: Iterable[float | None] | np.ndarray,
    y: Iterable[float | None] | np.ndarray,
    stat: float | str = 50.0,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> BootstrapInterval:
    """Confidence interval of ``stat(y) - stat(x)`` by the percentile bootstrap.

    ``stat`` is a percentile in (0, 100) or ``"mean"``. Each side is resampled with
    replacement on its own (the runs are independent), ``resamples`` times, from a
    ``numpy.random.default_rng(seed)``: the same inputs give the same interval. A tail
    percentile from few samples gives a wide interval, which is the point: a P99 of 200
    requests cannot show a small change. Raises ValueError on an empty side or a bad
    argument.
    """
    a, b = finite_samples(x), finite_samples(y)
    if a.size == 0 or b.size == 0:
        raise ValueError(f"bootstrap_diff needs values on both sides, got {a.size} and {b.size}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if resamples < 10:
        raise ValueError(f"resamples must be >= 10, got {resamples!r}")
    if stat != "mean":
        q = float(stat)
        if not 0.0 < q < 100.0:
            raise ValueError(f"stat must be a percentile in (0, 100) or 'mean', got {stat!r}")
        stat = q
    rng = np.random.default_rng(seed)
    diffs = _resampled(b, stat, resamples, rng) - _resampled(a, stat, resamples, rng)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(diffs, [tail, 100.0 - tail], method="linear")
    return BootstrapInterval(
        stat=stat,
        estimate=_stat(b, stat) - _stat(a, stat),
        low=float(low),
        high=float(high),
        confidence=confidence,
        resamples=int(resamples),
        seed=int(seed),
        n_x=int(a.size),
        n_y=int(b.size),
    )


@dataclass(frozen=True, slots=True)
class QuantileInterval:
    """A two-sided distribution-free interval of the ``q``-th percentile: ``[low, high]``
    order statistics of the sample; None where the sample is too small to bound that side
    (``-inf`` / ``+inf``)."""

    q: float
    estimate: float
    low: float | None
    high: float | None
    confidence: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "q": self.q,
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "n": self.n,
        }


def quantile_interval(
    values: Iterable[float | None] | np.ndarray, q: float, confidence: float = DEFAULT_CONFIDENCE
) -> QuantileInterval:
    """Two-sided ``confidence`` interval of the ``q``-th percentile from binomial order
    statistics: each bound is the one-sided bound at ``(1 + confidence) / 2``. Raises
    ValueError on an empty sample or a bad argument."""
    a = finite_samples(values)
    if a.size == 0:
        raise ValueError("quantile_interval needs at least one finite value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    one_sided = (1.0 + confidence) / 2.0
    return QuantileInterval(
        q=float(q),
        estimate=percentile(a, q),
        low=lower_confidence_bound(a, q, one_sided),
        high=upper_confidence_bound(a, q, one_sided),
        confidence=confidence,
        n=int(a.size),
    )


@dataclass(frozen=True, slots=True)
class QuantileShift:
    """Result of ``quantile_shift``: both sides' intervals and whether they are disjoint
    (``significant``), with ``direction`` +1 when the new percentile is higher, -1 lower,
    0 when the intervals overlap."""

    old: QuantileInterval
    new: QuantileInterval
    confidence: float

    @property
    def direction(self) -> int:
        if self.new.low is not None and self.old.high is not None and self.new.low > self.old.high:
            return 1
        if self.new.high is not None and self.old.low is not None and self.new.high < self.old.low:
            return -1
        return 0

    @property
    def significant(self) -> bool:
        return self.direction != 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": "order-statistic",
            "old": self.old.to_dict(),
            "new": self.new.to_dict(),
            "confidence": self.confidence,
            "direction": self.direction,
        }


def quantile_shift(
    x: Iterable[float | None] | np.ndarray,
    y: Iterable[float | None] | np.ndarray,
    q: float,
    confidence: float = DEFAULT_CONFIDENCE,
) -> QuantileShift:
    """Has the ``q``-th percentile moved from ``x`` (old) to ``y`` (new)? Each side gets a
    distribution-free interval at ``sqrt(confidence)``; both cover their true percentile
    with probability ``confidence`` (independent runs), so disjoint intervals show a change
    at that confidence. Conservative by construction: overlapping intervals do not prove
    the percentiles equal, only that these samples cannot tell them apart."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    each = math.sqrt(confidence)
    return QuantileShift(quantile_interval(x, q, each), quantile_interval(y, q, each), confidence)


@dataclass(frozen=True, slots=True)
class ProportionTest:
    """Result of ``two_proportion_test``: the two proportions, the pooled z and the
    two-sided p-value."""

    p_x: float
    p_y: float
    z: float
    p_value: float
    n_x: int
    n_y: int

    def significant(self, alpha: float = 1.0 - DEFAULT_CONFIDENCE) -> bool:
        return self.p_value < alpha

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": "two-proportion-z",
            "p_x": self.p_x,
            "p_y": self.p_y,
            "z": self.z,
            "p_value": self.p_value,
            "n_x": self.n_x,
            "n_y": self.n_y,
        }


def two_proportion_test(k_x: int, n_x: int, k_y: int, n_y: int) -> ProportionTest:
    """Pooled two-proportion z-test of ``k_x / n_x`` against ``k_y / n_y`` (two-sided).
    When both proportions are 0 or both 1 the pooled variance is zero: ``p_value=1``."""
    for k, n, side in ((k_x, n_x, "x"), (k_y, n_y, "y")):
        if n <= 0 or not 0 <= k <= n:
            raise ValueError(f"two_proportion_test: bad counts on side {side}: {k} of {n}")
    px, py = k_x / n_x, k_y / n_y
    pooled = (k_x + k_y) / (n_x + n_y)
    var = pooled * (1.0 - pooled) * (1.0 / n_x + 1.0 / n_y)
    if var <= 0:
        return ProportionTest(px, py, 0.0, 1.0, n_x, n_y)
    z = (py - px) / math.sqrt(var)
    return ProportionTest(px, py, z, min(1.0, 2.0 * normal_sf(abs(z))), n_x, n_y)


# Slack for comparing a computed binomial CDF with the confidence: a boundary case such as
# P(B >= 1) = 0.95 exactly must not be lost to rounding in the logs.
_EPS = 1e-12


def _finite(values: Iterable[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).ravel()
    return a[np.isfinite(a)]


def _linear_positions(n: int, q: float) -> tuple[int, int, float]:
    h = (n - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return lo, hi, h - lo


def percentile(values: Iterable[float] | np.ndarray, q: float) -> float:
    """P_q of the finite values with numpy's ``'linear'`` method; NaN when none."""
    a = _finite(values)
    if a.size == 0:
        return math.nan
    return float(np.percentile(a, q, method="linear"))


def _binom_cdf(n: int, p: float) -> tuple[int, np.ndarray]:
    """P(Binomial(n, p) ≤ j) for j = lo .. hi, returned as (lo, cdf).

    Only a window of ±40 standard deviations (+10) around n·p is evaluated: the mass
    outside it is far below float64 resolution, and the window keeps this O(√n) for the
    millions of token gaps a run has. The pmf comes from log-gamma at ``lo`` and the
    ratio pmf(j+1)/pmf(j) = (n−j)/(j+1)·p/(1−p) after it."""
    mu = n * p
    sd = math.sqrt(n * p * (1.0 - p))
    lo = max(0, math.floor(mu - 40.0 * sd - 10.0))
    hi = min(n, math.ceil(mu + 40.0 * sd + 10.0))
    log_p, log_q = math.log(p), math.log1p(-p)
    base = (
        math.lgamma(n + 1)
        - math.lgamma(lo + 1)
        - math.lgamma(n - lo + 1)
        + lo * log_p
        + (n - lo) * log_q
    )
    j = np.arange(lo, hi, dtype=np.float64)
    steps = np.log(n - j) - np.log(j + 1.0) + (log_p - log_q)
    logpmf = np.empty(hi - lo + 1, dtype=np.float64)
    logpmf[0] = base
    np.cumsum(steps, out=logpmf[1:])
    logpmf[1:] += base
    cdf = np.cumsum(np.exp(logpmf))
    return lo, np.minimum(cdf, 1.0)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def upper_rank(n: int, q: float, confidence: float = DEFAULT_CONFIDENCE) -> int | None:
    """The 1-based k of the order statistic X_(k) that is a one-sided upper confidence
    bound of the q-th percentile: the smallest k with P(Binomial(n, q/100) < k) ≥ c.
    None when no k ≤ n qualifies (n < :func:`samples_needed`)."""
    _check_confidence(confidence)
    p = float(q) / 100.0
    if n <= 0:
        return None
    lo, cdf = _binom_cdf(n, p)
    # cdf[i] = P(B <= lo + i) = P(B < k) for k = lo + i + 1; k must stay <= n.
    i = int(np.searchsorted(cdf, confidence - _EPS, side="left"))
    if i >= cdf.size:
        return None
    k = lo + i + 1
    return k if k <= n else None


def lower_rank(n: int, q: float, confidence: float = DEFAULT_CONFIDENCE) -> int | None:
    """The 1-based k of the order statistic X_(k) that is a one-sided lower confidence
    bound of the q-th percentile: the largest k with P(Binomial(n, q/100) ≥ k) ≥ c, i.e.
    P(B ≤ k − 1) ≤ 1 − c. None when even X_(1) does not qualify: (1 − p)^n > 1 − c."""
    _check_confidence(confidence)
    p = float(q) / 100.0
    if n <= 0:
        return None
    lo, cdf = _binom_cdf(n, p)
    # Largest j = k - 1 with cdf(j) <= 1 - c; cdf(j) for j < lo is ~0 <= 1 - c.
    i = int(np.searchsorted(cdf, 1.0 - confidence + _EPS, side="right")) - 1
    j = lo + i  # i = -1 means j = lo - 1 (mass below the window, ~0)
    if j < 0:
        return None
    return min(j + 1, n)


def samples_needed(
    q: float, confidence: float = DEFAULT_CONFIDENCE, side: Literal["upper", "lower"] = "upper"
) -> int:
    """Smallest n for which the one-sided bound of P_q exists at ``confidence``.

    Upper bound: the maximum X_(n) is the bound when 1 − p^n ≥ c, so
    n = ⌈log(1 − c) / log(p)⌉ (p = q/100): 299 for P99 at 95 %, 2995 for P99.9, 59 for P95,
    5 for P50. Lower bound: the same with 1 − p in place of p."""
    _check_confidence(confidence)
    p = float(q) / 100.0
    if not 0.0 < p < 1.0:
        raise ValueError(f"a percentile must be in (0, 100), got {q!r}")
    base = p if side == "upper" else 1.0 - p
    n = max(1, math.ceil(math.log1p(-confidence) / math.log(base)))
    # Guard the ceiling against rounding in the logs: 1 - base**n >= c is the definition.
    while n > 1 and 1.0 - base ** (n - 1) >= confidence:
        n -= 1
    while 1.0 - base**n < confidence:
        n += 1
    return n


def _order_stat(values: np.ndarray, k: int) -> float:
    return float(np.partition(values, k - 1)[k - 1])


def upper_confidence_bound(
    values: Iterable[float] | np.ndarray, q: float, confidence: float = DEFAULT_CONFIDENCE
) -> float | None:
    """Distribution-free one-sided upper confidence bound of P_q of the finite values:
    X_(k) with k from :func:`upper_rank`; None when there are too few samples."""
    a = _finite(values)
    k = upper_rank(a.size, q, confidence)
    return None if k is None else _order_stat(a, k)


def lower_confidence_bound(
    values: Iterable[float] | np.ndarray, q: float, confidence: float = DEFAULT_CONFIDENCE
) -> float | None:
    """Distribution-free one-sided lower confidence bound of P_q (for ``>`` objectives):
    X_(k) with k from :func:`lower_rank`; None when there are too few samples."""
    a = _finite(values)
    k = lower_rank(a.size, q, confidence)
    return None if k is None else _order_stat(a, k)
