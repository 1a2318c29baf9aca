"""One metric's samples summarised: percentiles, their confidence bounds and the samples
each bound needs (``Distribution``).

Percentiles use numpy's default ``'linear'`` method (the one vLLM ``benchmark_serving``
uses): for n sorted values x[0..n-1] and q in (0, 100), h = (n − 1)·q/100 and
P_q = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]). NaN values are dropped first. The bounds are
the distribution-free order statistics of ``stats.upper_rank``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_llmslo.catalog import PERCENTILES, qkey
from pytest_llmslo.stats import (
    DEFAULT_CONFIDENCE,
    _linear_positions,
    samples_needed,
    upper_rank,
)

__all__ = ["Distribution"]


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
        every bound, so this stays O(n) for millions of token gaps; ``values`` are only
        read, and copied once (the partition), or twice where some are not finite."""
        a = np.asarray(values, dtype=np.float64).ravel()
        finite = np.isfinite(a)
        if not finite.all():
            a = a[finite]
        del finite
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
        # The moments first: the partition's copy is then the only one alive.
        mean, std, lo_v, hi_v = float(a.mean()), float(a.std()), float(a.min()), float(a.max())
        part = np.partition(a, sorted(kth))
        pct: dict[float, float] = {}
        for q in qs:
            lo, hi, frac = _linear_positions(n, q)
            x_lo, x_hi = float(part[lo]), float(part[hi])
            pct[q] = x_lo + frac * (x_hi - x_lo)
        ubs = {q: (None if (r := ranks[q]) is None else float(part[r - 1])) for q in qs}
        return cls(
            name=name,
            unit=unit,
            count=n,
            mean=mean,
            std=std,
            min=lo_v,
            max=hi_v,
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
