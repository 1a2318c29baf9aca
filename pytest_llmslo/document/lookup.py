"""Finding things in a session's results: the point of a test on an engine at a load level
(by its ``LoadLevel``, its dict or its label ``c32``), a test's capacity search and the
level it was judged by, and the value of a comparison metric (``catalog.METRIC_SPECS``)
in a point."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.document.results import Results
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.sweep import SweepPoint, finite_or_none

__all__ = [
    "capacity_point",
    "find_capacity",
    "find_point",
    "find_point_index",
    "level_key",
    "metric_value",
    "same_level",
]

#: ``(mode, value, arrival)`` of a load level; ``"*"`` for a label that names no arrival.
LevelKey = tuple[str, float, str]


def level_key(level: LoadLevel | Mapping[str, Any] | str) -> LevelKey:
    """The key a level is found by: a ``LoadLevel``, its dict, or its label (``c32``,
    ``r2.5``: a rate label matches any arrival process). ``ValueError`` for a label that
    is none, ``TypeError`` for anything else."""
    if isinstance(level, LoadLevel):
        return (level.mode, float(level.value), level.arrival)
    if isinstance(level, Mapping):
        lv = LoadLevel.from_dict(level)
        return (lv.mode, float(lv.value), lv.arrival)
    if isinstance(level, str):
        text = level.strip()
        try:
            if text[:1] == "c":
                return ("concurrency", float(text[1:]), "closed")
            if text[:1] == "r":
                return ("rate", float(text[1:]), "*")
        except ValueError:
            pass
        raise ValueError(f"not a load level label: {level!r} (expected e.g. c32 or r2.5)")
    raise TypeError(f"a load level is a LoadLevel, its dict or its label, got {level!r}")


def same_level(a: LevelKey, b: LevelKey) -> bool:
    # A label such as "r2.5" names no arrival process: it matches any.
    return a[0] == b[0] and a[1] == b[1] and (a[2] == b[2] or "*" in (a[2], b[2]))


def find_point_index(
    results: Results,
    test: str,
    engine: str,
    level: LoadLevel | Mapping[str, Any] | str,
    skip: Container[int] = (),
) -> int | None:
    """The index in ``results.points`` of the point of ``test`` on ``engine`` at ``level``
    (a level measured twice gives its last point), leaving out the indices in ``skip``."""
    want = level_key(level)
    found = None
    for i, p in enumerate(results.points):
        if i in skip or p.test != test or p.engine != engine:
            continue
        if same_level(level_key(p.level), want):
            found = i
    return found


def find_point(
    results: Results, test: str, engine: str, level: LoadLevel | Mapping[str, Any] | str
) -> SweepPoint | None:
    """The point of ``test`` on ``engine`` at ``level`` (see ``find_point_index``), or
    None."""
    i = find_point_index(results, test, engine, level)
    return None if i is None else results.points[i]


def find_capacity(
    results: Results, test: str, engine: str, mode: str | None = None
) -> CapacityResult | None:
    """The capacity search of ``test`` on ``engine`` (in load ``mode`` when given), or
    None."""
    cap = results.capacities.get((engine, test))
    return cap if cap is not None and (mode is None or cap.mode == mode) else None


def capacity_point(capacity: CapacityResult) -> LoadLevel | None:
    """The level a capacity search judged its test by: the capacity, or the last probe
    when no level passed."""
    if capacity.capacity is not None:
        return capacity.capacity
    return capacity.history[-1][0] if capacity.history else None


def metric_value(point: SweepPoint, metric: str) -> float | None:
    """The value of a comparison metric in a point: latencies in ms from the summary's
    distributions, rates and fractions from the summary (goodput and attainment from the
    verdict when the test evaluated one, as the reports do). None when undefined."""
    spec = METRIC_SPECS[metric]
    summary = point.summary
    if spec.kind == "latency":
        dist = summary.distributions.get(spec.field)
        if dist is None or not dist.count:
            return None
        if spec.stat == "mean":
            return finite_or_none(dist.mean)
        return finite_or_none(dist.percentiles.get(spec.quantile))
    if point.verdict is not None and spec.field in ("goodput_tok_s", "goodput_req_s", "attainment"):
        value = finite_or_none(getattr(point.verdict, spec.field))
        if value is not None:
            return value
    return finite_or_none(getattr(summary, spec.field, None))
