"""Change points of a series of runs: the runs where a metric shifted, found by E-Divisive
means and kept when a Student t-test calls the shift significant.

The method is Apache Otava's (formerly DataStax Hunter; Fleming et al., "Hunter: Using
Change Point Detection to Hunt for Performance Regressions", ICPE 2023), itself MongoDB's
E-Divisive means (Matteson & James, "A Nonparametric Approach for Multiple Change Point
Analysis of Multivariate Data", JASA 2014; Daly et al., "The Use of Change Point Detection
to Identify Software Performance Regressions in a Continuous Integration System", ICPE
2020) with the permutation test replaced by a t-test: a permutation test of five runs
cannot reach p < 0.05 (of the 10 ways to place two shifted runs among five, 2 look like a
shift at an end), while nightly histories are that short; the t-test is deterministic too.

- **Where**: the split ``tau`` that maximises the energy distance between ``x[:tau]`` and
  ``x[tau:]`` (the E-Divisive ``q`` statistic, alpha = 1), each side at least
  ``min_size`` runs long;
- **whether**: a two-sided Student t-test of the two sides' means (pooled variance),
  Bonferroni-corrected for the number of splits the best was chosen from, gives
  ``p < alpha``, and the change is at least ``min_change`` of the earlier side's mean (a
  significant change of 1 % is not worth an alarm);
- **more**: each side is searched again (binary segmentation), so a series with several
  shifts gets each.

Pure numpy and the standard library; a series of identical values has no change point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MIN_CHANGE",
    "ChangePoint",
    "change_points",
    "energy_split",
    "segments",
    "student_t_sf",
    "t_test",
]

#: The significance level of a change point.
DEFAULT_ALPHA = 0.01
#: The smallest relative change of the mean that is a change point (5 %, the default
#: tolerance of throughput and goodput).
DEFAULT_MIN_CHANGE = 0.05


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A shift of the series at ``index``: ``x[index]`` is the first value of the new
    segment. ``before`` and ``after`` are the means of the segments on either side (as
    searched), ``p`` the t-test's two-sided p-value."""

    index: int
    before: float
    after: float
    p: float

    @property
    def change(self) -> float:
        """The relative change of the mean (``after / before - 1``; inf from a zero mean)."""
        if self.before == 0:
            return math.inf if self.after != 0 else 0.0
        return self.after / self.before - 1.0


def energy_split(x: np.ndarray, min_size: int = 2) -> tuple[int, float] | None:
    """The split ``tau`` (``x[:tau]`` | ``x[tau:]``) with the largest E-Divisive ``q``
    (the scaled energy distance between the two sides) and that ``q``; None when no split
    leaves ``min_size`` values a side."""
    n = len(x)
    if n < 2 * min_size:
        return None
    d = np.abs(x[:, None] - x[None, :])
    best: tuple[int, float] | None = None
    for tau in range(min_size, n - min_size + 1):
        m, k = tau, n - tau
        between = d[:tau, tau:].mean()
        within_a = d[:tau, :tau].sum() / (m * (m - 1)) if m > 1 else 0.0
        within_b = d[tau:, tau:].sum() / (k * (k - 1)) if k > 1 else 0.0
        q = (m * k / (m + k)) * (2.0 * between - within_a - within_b)
        if best is None or q > best[1]:
            best = (tau, float(q))
    return best


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified
    Lentz, as in Numerical Recipes' ``betacf``)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(ln + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """The two-sided p-value of Student's t with ``df`` degrees of freedom:
    P(|T| >= |t|)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_test(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided p-value of Student's t-test (pooled variance) of the means of ``a``
    and ``b``. Two sides without spread are as different as their means: p = 0 when they
    differ, 1 when equal."""
    n1, n2 = len(a), len(b)
    df = n1 + n2 - 2
    if n1 < 1 or n2 < 1 or df < 1:
        return 1.0
    diff = float(b.mean() - a.mean())
    ss = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
    scale = math.sqrt(ss / df * (1.0 / n1 + 1.0 / n2))
    if scale == 0.0 or not math.isfinite(scale):
        return 0.0 if diff != 0.0 else 1.0
    return student_t_sf(diff / scale, df)


def _relative(before: float, after: float) -> float:
    if before == 0:
        return math.inf if after != 0 else 0.0
    return abs(after / before - 1.0)


def change_points(
    values: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_change: float = DEFAULT_MIN_CHANGE,
    min_size: int = 2,
) -> list[ChangePoint]:
    """The change points of ``values`` (in order), each the first index of a new segment.
    ``values`` must be finite (leave out the runs without a value first)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if min_size < 1:
        raise ValueError(f"min_size must be at least 1, got {min_size}")
    x = np.asarray(values, dtype=float)
    if not np.isfinite(x).all():
        raise ValueError("change_points takes finite values only")
    found: list[ChangePoint] = []
    pending = [(0, len(x))]
    while pending:
        lo, hi = pending.pop()
        split = energy_split(x[lo:hi], min_size)
        if split is None:
            continue
        tau = lo + split[0]
        a, b = x[lo:tau], x[tau:hi]
        # The split is the best of the candidates: Bonferroni over them, or a stationary
        # series would get a "significant" best split one time in a few.
        candidates = hi - lo - 2 * min_size + 1
        p = min(1.0, t_test(a, b) * candidates)
        before, after = float(a.mean()), float(b.mean())
        if p >= alpha or _relative(before, after) < min_change:
            continue
        found.append(ChangePoint(tau, before, after, p))
        pending.extend([(lo, tau), (tau, hi)])
    return sorted(found, key=lambda c: c.index)


def segments(n: int, points: Sequence[ChangePoint]) -> list[tuple[int, int]]:
    """The ``[start, end)`` segments of a series of ``n`` values cut at ``points``."""
    cuts = [0, *(c.index for c in points), n]
    return [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1) if cuts[i] < cuts[i + 1]]
