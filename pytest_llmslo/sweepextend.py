"""How far to extend a sweep: the next concurrency or rate past the last level, until
goodput falls below half of its best (``extend_levels``, ``extend_sweep``). The sweep's
points, knee and frontier are ``sweep.py``'s."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pytest_llmslo.records import LoadLevel
from pytest_llmslo.sweep import SweepPoint, finite_or_none, level_order, point_goodput

__all__ = ["EXTEND_DROP", "EXTEND_FACTOR", "extend_levels", "extend_sweep", "round_significant"]

#: Growth of an extended sweep: x1.5 per step (48 -> 72 -> 108 -> 162 for concurrency,
#: rounded up). Finer than doubling, so the knee is not overshot by a whole power of two,
#: while a 50 % goodput drop is still reached in a few steps.
EXTEND_FACTOR = 1.5

#: The extension stops once goodput at the last level falls below this fraction of its best.
EXTEND_DROP = 0.5


def extend_levels(
    levels: Sequence[LoadLevel],
    best_goodput: float | None,
    last_goodput: float | None,
    *,
    factor: float = EXTEND_FACTOR,
    drop: float = EXTEND_DROP,
    max_value: float | None = None,
) -> LoadLevel | None:
    """The next level past the last of ``levels``, or None when the sweep should stop.

    Stops when goodput at the last level is below ``drop`` (50 %) of the best goodput seen,
    when the best goodput is zero or unknown (no level produced good requests: there is no
    knee to go past), when the last level has no goodput (its client run was invalid or no
    objective was evaluated: a higher load would be invalid too), or when ``max_value`` is
    reached. The next value is ``last * factor``: for concurrency rounded up to an integer
    (at least +1); for a rate rounded to 3 significant digits. A rate level keeps its arrival
    process and seed.
    """
    if not levels:
        raise ValueError("extend_levels needs the levels run so far")
    if not factor > 1:
        raise ValueError(f"factor must be > 1, got {factor!r}")
    last = max(levels, key=lambda lv: lv.value)
    best, cur = finite_or_none(best_goodput), finite_or_none(last_goodput)
    if best is None or best <= 0 or cur is None or cur < drop * best:
        return None
    if max_value is not None and last.value >= max_value:
        return None
    if last.mode == "concurrency":
        value = float(max(math.ceil(last.value * factor - 1e-9), int(last.value) + 1))
    else:
        value = round_significant(last.value * factor, 3)
    if max_value is not None:
        value = min(value, float(max_value))
    return last.scaled(value)


def extend_sweep(points: Sequence[SweepPoint], **kwargs: Any) -> LoadLevel | None:
    """``extend_levels`` for one sweep's points: best goodput over its valid points, last
    goodput at its highest level. Keyword arguments go to ``extend_levels``."""
    if not points:
        return None
    order = level_order(points)
    valid = [point_goodput(points[i]) for i in order if points[i].summary.valid]
    best = max((g for g in valid if g is not None), default=None)
    top = points[order[-1]]
    last = point_goodput(top) if top.summary.valid else None
    return extend_levels([p.level for p in points], best, last, **kwargs)


def round_significant(x: float, digits: int) -> float:
    """``x`` rounded to ``digits`` significant digits (a rounder level reads better)."""
    if x == 0:
        return 0.0
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))
