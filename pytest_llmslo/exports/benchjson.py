"""The levels as continuous-benchmarking tools ingest them.

- **github-action-benchmark** (benchmark-action/github-action-benchmark), its custom
  tools ``customSmallerIsBetter`` and ``customBiggerIsBetter``: a JSON array of
  ``{"name", "unit", "value", "range"?, "extra"?}``, one file per direction (a file is
  read by one ``tool``). Names are ``engine/test/level metric``; ``range`` is the 95 %
  interval (``"± 1.2"``, its larger half) where known; ``extra`` has the request count
  and the engine's version.
- **Bencher Metric Format** (bencher.dev/docs/reference/bencher-metric-format):
  ``{benchmark: {measure: {"value", "lower_value"?, "upper_value"?}}}``; the benchmark is
  ``engine/test/level`` (at most 1024 characters), each metric a measure (its slug, at
  most 64: ``ttft-p99-ms``).
"""

from __future__ import annotations

import re
from typing import Any

from pytest_llmslo.document import Results

from .levelmetrics import LevelMetric, level_metrics

__all__ = ["bencher_metrics", "github_benchmark"]

_SLUG_RE = re.compile(r"[^a-z0-9]+")


def _unit(m: LevelMetric) -> str:
    return "%" if m.metric in ("attainment", "error_rate") else m.unit


def _value(m: LevelMetric) -> float:
    return 100.0 * m.value if m.metric in ("attainment", "error_rate") else m.value


def github_benchmark(results: Results, *, bigger: bool) -> list[dict[str, Any]]:
    """The ``customBiggerIsBetter`` (``bigger``) or ``customSmallerIsBetter`` entries."""
    out: list[dict[str, Any]] = []
    for m in level_metrics(results):
        if m.higher_is_better != bigger:
            continue
        entry: dict[str, Any] = {
            "name": f"{m.benchmark} {m.metric}",
            "unit": _unit(m),
            "value": _value(m),
        }
        if m.low is not None and m.high is not None:
            entry["range"] = f"± {max(m.value - m.low, m.high - m.value):.3g}"
        version = results.engine_version(m.engine)
        entry["extra"] = f"{m.requests} requests" + (f"; {m.engine} {version}" if version else "")
        out.append(entry)
    return out


def _slug(m: LevelMetric) -> str:
    unit = "pct" if m.metric in ("attainment", "error_rate") else m.unit
    return _SLUG_RE.sub("-", f"{m.metric} {unit}".lower()).strip("-")[:64]


def bencher_metrics(results: Results) -> dict[str, dict[str, dict[str, float]]]:
    """The levels in Bencher Metric Format."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for m in level_metrics(results):
        measure: dict[str, float] = {"value": _value(m)}
        if m.low is not None and m.high is not None:
            measure["lower_value"] = m.low
            measure["upper_value"] = m.high
        out.setdefault(m.benchmark[:1024], {})[_slug(m)] = measure
    return out
