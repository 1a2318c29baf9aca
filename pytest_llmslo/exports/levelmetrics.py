"""The numbers of each measured level that the exports carry: one ``LevelMetric`` per
engine, test, load level and metric, with its unit, its direction and, for a latency
percentile whose per-request samples bound it (not ITL, whose percentiles pool every
token gap), its distribution-free 95 % interval."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pytest_llmslo import stats
from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.document import Results
from pytest_llmslo.document.lookup import metric_value
from pytest_llmslo.sweep import SweepPoint

__all__ = ["EXPORTED", "LevelMetric", "level_metrics"]

#: The metrics exported per level (the comparison's names, ``catalog.METRIC_SPECS``).
EXPORTED: tuple[str, ...] = (
    "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "tpot_p50", "e2e_p50", "e2e_p99",
    "throughput", "req_s", "goodput", "attainment", "error_rate",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LevelMetric:
    """One metric of one level: ``value`` in ``unit``; ``low``/``high`` its 95 % interval
    where known."""

    engine: str
    test: str
    level: str
    metric: str
    value: float
    unit: str
    higher_is_better: bool
    low: float | None = None
    high: float | None = None
    requests: int = 0

    @property
    def benchmark(self) -> str:
        """``engine/test/level``: the benchmark a level is to the tools."""
        return f"{self.engine}/{self.test}/{self.level}"


def _interval(point: SweepPoint, metric: str) -> tuple[float | None, float | None]:
    spec = METRIC_SPECS[metric]
    # ITL percentiles pool every token gap; the samples are each request's mean gap: their
    # interval would bound another statistic.
    if spec.kind != "latency" or not isinstance(spec.stat, int | float) or spec.field == "itl":
        return None, None
    values = (point.samples or {}).get(f"{spec.field}_ms")
    if not isinstance(values, list | tuple):
        return None, None
    finite = stats.finite_samples(list(values))
    if finite.size == 0:
        return None, None
    ci = stats.quantile_interval(finite, float(spec.stat))
    return ci.low, ci.high


def level_metrics(results: Results) -> Iterator[LevelMetric]:
    """Every exported metric of every point of ``results`` that has a value."""
    for point in results.points:
        for metric in EXPORTED:
            value = metric_value(point, metric)
            if value is None:
                continue
            spec = METRIC_SPECS[metric]
            low, high = _interval(point, metric)
            yield LevelMetric(
                point.engine,
                point.test,
                point.level.label,
                metric,
                value,
                spec.unit,
                spec.higher_is_better,
                low,
                high,
                int(point.summary.requests),
            )
